"""The trainer: spec 3.4's loss, AdamW with linear warm-up and cosine decay, checkpoints, resuming.

    PYTHONPATH=python:. /usr/bin/python3 -m training.train \
        --config training/configs/photon-a0.json --corpus out/train/corpus \
        --out out/train/runs/photon-a0 [--set tokens=N] [--threads 1] [--restart]

A run directory holds checkpoint.pt (rewritten atomically every `checkpoint_every` steps and at the
end), log.jsonl (one record per step: token loss, recursive loss per level, learning rate; and one
per validation pass) and, when the token budget is spent, final/: config.json, model.safetensors
(spec sections 6 and 8) and the corpus's tokenizer.model, which `photon convert --from` reads.
Running the same command again resumes from checkpoint.pt; a finished run is left as it is.
Batches depend only on (seed, step), so a resumed run trains as an uninterrupted one.
"""

import argparse
import fcntl
import json
import math
import os
import pathlib
import sys
import time

import numpy as np
import torch

from photon_ref.model import Config, Vanilla
from training.corpus import BOS
from training.export import final_weights, load_weights, write_interchange
from training.model import (build_train_model, greedy_path_losses, init_weights, losses,
                            recgen_token_loss)

TRAIN_DEFAULTS = {
    "alpha": 0.0,  # weight of the recursive loss (spec 3.4)
    "detach_rec_target": False,  # no gradient from the recursive loss into the encoder states
    # RecGen-conditioned NLL (training.model.recgen_token_loss), added with this weight: each step
    # draws a prompt length K uniformly from recgen_prompt (both ends included, the same K for the
    # whole batch) and scores the recgen_horizon tokens after it (null: to the end) as a RecGen
    # session that was given the first K tokens would; recgen_units draws that many level-1 units of
# those to score (an unbiased estimate at a fraction of the cost).
    "recgen_weight": 0.0,
    "recgen_prompt": [1, 64],
    "recgen_horizon": None,
    "recgen_units": None,  # level-1 windows scored per step, drawn after the prompt (null: all)
    # Self-distillation (training.model.greedy_path_losses): each step the model continues the
    # first K tokens of every sequence (K uniform in distill_prompt) greedily with HierGen for
    # distill_tokens tokens; distill_weight weighs the RecGen NLL of that continuation, and
    # greedy_latent_weight the distance of Xhat(1) to the (detached) X(1) along it.
    "distill_weight": 0.0,
    "greedy_latent_weight": 0.0,
    "distill_prompt": [16, 64],
    "distill_tokens": 64,
    # Start from these weights (a model.safetensors or weights.npz of spec section 6 names)
    # instead of the seeded init.
    "init_from": None,
    "seq_len": 256,  # tokens per training sequence, BOS included
    "batch_size": 16,
    "tokens": 2_000_000,  # budget: training tokens (batch_size * seq_len per step)
    "lr": 2e-3,
    "min_lr_ratio": 0.1,  # the cosine decays to lr * min_lr_ratio
    "warmup_fraction": 0.05,
    "weight_decay": 0.1,  # on matrices and embeddings only
    "betas": [0.9, 0.95],
    "grad_clip": 1.0,
    "seed": 1,
    "eval_every": 50,  # steps between validation passes
    "checkpoint_every": 25,
}


def load_run_config(path, overrides):
    with open(path) as f:
        j = json.load(f)
    unknown = set(j.get("train", {})) - set(TRAIN_DEFAULTS)
    if unknown:
        raise SystemExit(f"{path}: unknown train settings {sorted(unknown)}")
    train = {**TRAIN_DEFAULTS, **j.get("train", {}), **overrides}
    return j["name"], j["model"], train


def learning_rate(step, total_steps, train):
    """Linear warm-up to lr over the first warmup steps, then cosine decay to lr * min_lr_ratio."""
    warmup = max(1, round(train["warmup_fraction"] * total_steps))
    if step < warmup:
        return train["lr"] * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    floor = train["min_lr_ratio"]
    return train["lr"] * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def train_batch(stream, step, train):
    """[B, seq_len] int64: BOS then seq_len - 1 tokens from random offsets, a function of
    (seed, step)."""
    rng = np.random.default_rng([train["seed"], step])
    n = train["seq_len"] - 1
    offsets = rng.integers(0, len(stream) - n, size=train["batch_size"])
    rows = np.stack([stream[o:o + n] for o in offsets]).astype(np.int64)
    return torch.from_numpy(np.concatenate([np.full((len(rows), 1), BOS), rows], axis=1))


def distill_prompt_length(step, train):
    """The prompt length of a step's self-distillation, a function of (seed, step)."""
    low, high = train["distill_prompt"]
    return int(np.random.default_rng([train["seed"], step, 2]).integers(low, high + 1))


def recgen_draw(step, train, chunk_len):
    """(prompt length K, level-1 units to score or None) of a step's RecGen loss, a function of
    (seed, step): K uniform in recgen_prompt, the units drawn without replacement from those that
    hold a position in [K, seq_len)."""
    rng = np.random.default_rng([train["seed"], step, 1])
    low, high = train["recgen_prompt"]
    K = int(rng.integers(low, high + 1))
    if not train["recgen_units"]:
        return K, None
    candidates = np.arange(K // chunk_len, -(-train["seq_len"] // chunk_len))
    chosen = rng.choice(candidates, size=min(train["recgen_units"], len(candidates)),
                        replace=False)
    return K, torch.from_numpy(np.sort(chosen))


def validation_batches(stream, train):
    """The validation split cut into consecutive windows of seq_len - 1 tokens, each after BOS."""
    n = train["seq_len"] - 1
    windows = len(stream) // n
    rows = stream[:windows * n].reshape(windows, n).astype(np.int64)
    rows = np.concatenate([np.full((windows, 1), BOS), rows], axis=1)
    size = train["batch_size"]
    return [torch.from_numpy(rows[i:i + size]) for i in range(0, windows, size)]


VALID_RECGEN_PROMPT = 32  # the prompt length of docs/quality.md's RecGen perplexity


@torch.no_grad()
def validate(model, batches, alpha):
    """(token loss, [recursive loss per level], RecGen token loss after a 32-token prompt or None
    for models without RecGen), means over the validation windows."""
    model.eval()
    token_sum, rec_sum, recgen_sum, count = 0.0, None, 0.0, 0
    has_recgen = not isinstance(model, Vanilla) and model.config.num_levels >= 2
    for tokens in batches:
        _, token_loss, rec, _ = losses(model, tokens, alpha)
        token_sum += float(token_loss) * len(tokens)
        rec_values = [float(r) * len(tokens) for r in rec]
        rec_sum = rec_values if rec_sum is None else [a + b for a, b in zip(rec_sum, rec_values)]
        if has_recgen:
            recgen_sum += float(recgen_token_loss(model, tokens, VALID_RECGEN_PROMPT)) * len(tokens)
        count += len(tokens)
    model.train()
    return (token_sum / count, [r / count for r in rec_sum or []],
            recgen_sum / count if has_recgen else None)


def optimizer_for(model, train):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": train["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=train["lr"], betas=tuple(train["betas"]))


class Progress:
    """A one-line progress bar on a terminal; a plain line every `every` steps otherwise (logs)."""

    def __init__(self, total, every=10):
        self.total, self.every = total, every
        self.tty = sys.stderr.isatty()

    def update(self, step, text):
        done = step / self.total
        bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
        line = f"[{bar}] {step}/{self.total} {text}"
        if self.tty:
            sys.stderr.write("\r" + line)
        elif step % self.every == 0 or step == self.total:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.tty:
            sys.stderr.write("\n")


def format_duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def save_checkpoint(path, model, optimizer, step, elapsed):
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "elapsed": elapsed}, tmp)
    os.replace(tmp, path)


def read_log(path, up_to_step):
    """The log's records up to a checkpoint's step (later ones belong to steps that are redone)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r["step"] <= up_to_step]


def run(args):
    name, model_json, train = load_run_config(args.config, args.overrides)
    out = pathlib.Path(args.out)
    final = out / "final"
    if final_weights(final) is not None and not args.restart:
        print(f"{name}: finished already ({final}); --restart to train again")
        return
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / "lock", "w")  # held until the process exits
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"{name}: another trainer is running in {out}")
    torch.set_num_threads(args.threads)
    corpus = pathlib.Path(args.corpus)
    train_stream = np.load(corpus / "train.npy")
    valid = validation_batches(np.load(corpus / "valid.npy"), train)

    config = Config.from_json(model_json)
    model = build_train_model(config)
    init_weights(model, train["seed"])
    if train["init_from"]:
        model.load_state_dict(load_weights(train["init_from"]), strict=True)
    optimizer = optimizer_for(model, train)
    tokens_per_step = train["batch_size"] * train["seq_len"]
    total_steps = max(1, train["tokens"] // tokens_per_step)
    checkpoint = out / "checkpoint.pt"
    step, elapsed = 0, 0.0
    if checkpoint.exists() and not args.restart:
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed = state["step"], state["elapsed"]
        print(f"{name}: resuming at step {step} of {total_steps}", file=sys.stderr)
    records = read_log(out / "log.jsonl", step) if step else []
    (out / "run.json").write_text(json.dumps({"name": name, "model": model_json, "train": train,
                                              "parameters": sum(p.numel() for p in
                                                                model.parameters()),
                                              "total_steps": total_steps}, indent=1) + "\n")
    log = open(out / "log.jsonl", "w")
    for record in records:
        log.write(json.dumps(record) + "\n")
    log.flush()

    def write(record):
        log.write(json.dumps(record) + "\n")
        log.flush()

    progress = Progress(total_steps)
    alpha = train["alpha"]
    is_photon = not isinstance(model, Vanilla)
    model.train()
    while step < total_steps:
        started = time.monotonic()
        lr = learning_rate(step, total_steps, train)
        for group in optimizer.param_groups:
            group["lr"] = lr
        tokens = train_batch(train_stream, step, train)
        recgen = None
        if train["recgen_weight"]:
            K, units = recgen_draw(step, train, config.level(1).chunk_len)
            recgen = (train["recgen_weight"], K, train["recgen_horizon"], units)
        loss, token_loss, rec, recgen_loss = losses(model, tokens, alpha,
                                                    train["detach_rec_target"], recgen)
        distill = None
        if train["distill_weight"] or train["greedy_latent_weight"]:
            distill = greedy_path_losses(model, tokens[:, :distill_prompt_length(step, train)],
                                         train["distill_tokens"])
            loss = (loss + train["distill_weight"] * distill[0]
                    + train["greedy_latent_weight"] * distill[1])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train["grad_clip"])
        optimizer.step()
        step += 1
        elapsed += time.monotonic() - started
        record = {"kind": "train", "step": step, "tokens": step * tokens_per_step,
                  "loss": float(loss), "token_loss": float(token_loss),
                  "rec_loss": [float(r) for r in rec],
                  "recgen_loss": None if recgen_loss is None else float(recgen_loss),
                  "distill_loss": None if distill is None else [float(d) for d in distill],
                  "lr": lr, "grad_norm": float(grad_norm),
                  "elapsed": round(elapsed, 3)}
        write(record)
        if step % train["eval_every"] == 0 or step == total_steps:
            valid_token, valid_rec, valid_recgen = validate(model, valid, alpha)
            write({"kind": "valid", "step": step, "tokens": step * tokens_per_step,
                   "token_loss": valid_token, "rec_loss": valid_rec,
                   "recgen_loss": valid_recgen})
        if step % train["checkpoint_every"] == 0 or step == total_steps:
            save_checkpoint(checkpoint, model, optimizer, step, elapsed)
        rate = step * tokens_per_step / elapsed
        eta = (total_steps - step) * tokens_per_step / rate
        rec_text = "".join(f" rec {r:.3f}" for r in record["rec_loss"]) if is_photon else ""
        if recgen_loss is not None:
            rec_text += f" recgen {float(recgen_loss):.3f}"
        if distill is not None:
            rec_text += f" distill {float(distill[0]):.3f} / {float(distill[1]):.3f}"
        progress.update(step, f"loss {record['token_loss']:.3f}{rec_text} lr {lr:.1e} "
                              f"{rate:.0f} tok/s eta {format_duration(eta)}")
    progress.close()
    log.close()
    tokenizer = corpus / "tokenizer.model"
    write_interchange(model, model_json, final, tokenizer if tokenizer.exists() else None)
    print(f"{name}: {total_steps} steps, {total_steps * tokens_per_step} tokens in "
          f"{format_duration(elapsed)}; wrote {final}/config.json and model.safetensors")


def parse_override(text):
    key, _, value = text.partition("=")
    if key not in TRAIN_DEFAULTS:
        raise argparse.ArgumentTypeError(f"--set: unknown train setting {key!r}")
    return key, json.loads(value)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="training/configs/*.json")
    parser.add_argument("--corpus", default="out/train/corpus", help="scripts/make-corpus output")
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 suits a shared machine: with 2, a descheduled "
                             "OpenMP thread stalls the other; measured 8x slower under load)")
    parser.add_argument("--set", dest="overrides_list", action="append", default=[],
                        type=parse_override, metavar="KEY=JSON",
                        help="override a train setting, e.g. --set tokens=100000")
    parser.add_argument("--restart", action="store_true", help="ignore a checkpoint, start over")
    args = parser.parse_args(argv)
    args.overrides = dict(args.overrides_list)
    run(args)


if __name__ == "__main__":
    main()
