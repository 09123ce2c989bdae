"""How faithful a trained PHOTON model's RecGen is, measured in PyTorch on the test split.

    PYTHONPATH=python:. /usr/bin/python3 -m training.recgen_quality out/train/runs/photon-a0 ... \
        [--corpus out/train/corpus] [--prompt-tokens 32] [--continuation 64] [--prompts N]

For each run (final/model.safetensors or weights.npz, else checkpoint.pt), over the test segments
(BOS + the segment's tokens, as `photon score -f` sees them):
- hiergen_ppl: teacher-forced perplexity of every token (HierGen scores as teacher forcing);
- recgen_ppl: perplexity of the tokens after the first `prompt_tokens` (BOS included) under RecGen
  with those as the prompt (training.model.TrainPhoton.recgen_batch, which equals
  photon_ref.recgen_logits: training/test_model.py), and hiergen_ppl_after_prompt, teacher
  forcing's on the same tokens; recgen_ratio = recgen_ppl / hiergen_ppl_after_prompt (as
  training.evaluate's ratio_to_hiergen), and that ratio over the tokens 0-15, 16-63 and 64-255
  positions after the prompt (recgen_ratio_by_distance);
- agreement: greedy decoding of `continuation` tokens after each segment's first `prompt_tokens`
  tokens in both modes (argmax, lowest id on ties): the fraction of positions holding the same
  token, and the mean common prefix.
training.evaluate measures the shipped numbers through the SDK; this module is the trainer's quick
view (float32, batched), used to choose designs.
"""

import argparse
import json
import math
import pathlib
import subprocess

import numpy as np
import torch
from torch.nn import functional as F

from photon_ref.model import Config
from training.corpus import BOS
from training.export import final_weights, load_weights
from training.model import build_train_model, hiergen_greedy

PAD = 0  # pads segments to one length; causal models never let a later position change an earlier


def load_run(run_dir):
    run_dir = pathlib.Path(run_dir)
    model_json = json.loads((run_dir / "run.json").read_text())["model"]
    model = build_train_model(Config.from_json(model_json))
    weights = final_weights(run_dir / "final")
    if weights is not None:
        state = load_weights(weights)
    else:
        state = torch.load(run_dir / "checkpoint.pt")["model"]
    model.load_state_dict(state)
    return model.eval()


def load_photon_file(photon, path, dtype=torch.float64):
    """The model in a .photon file, as the engine reads it: every tensor at the offset and in the
    dtype `photon inspect --json` reports, widened to `dtype`."""
    info = json.loads(subprocess.run([str(photon), "inspect", str(path), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    model = build_train_model(Config.from_json(info["config"]))
    types = {"f32": np.float32, "f16": np.float16}
    state = {}
    with open(path, "rb") as f:
        for tensor in info["file"]["tensors"]:
            if tensor["dtype"] not in types:
                raise SystemExit(f"{path}: {tensor['name']} is {tensor['dtype']}, not f32/f16")
            f.seek(tensor["offset"])
            array = np.frombuffer(f.read(tensor["bytes"]), dtype=types[tensor["dtype"]])
            state[tensor["name"]] = torch.from_numpy(array.reshape(tensor["shape"]).copy())
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return model.to(dtype).eval()


def test_segments(corpus):
    """[BOS] + the ids of every line of test-segments.txt."""
    text = (pathlib.Path(corpus) / "test-segments.txt").read_text(encoding="utf-8")
    out = subprocess.run(["spm_encode", f"--model={pathlib.Path(corpus) / 'tokenizer.model'}",
                          "--output_format=id"], input=text, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return [[BOS] + [int(t) for t in line.split()] for line in out]


def padded(sequences):
    length = max(len(s) for s in sequences)
    return torch.tensor([s + [PAD] * (length - len(s)) for s in sequences], dtype=torch.long)


DISTANCES = ((0, 16), (16, 64), (64, 256))  # tokens after the prompt, for the ratio by distance


@torch.no_grad()
def perplexities(model, segments, prompt_tokens, batch_size=16):
    sums = {"all": 0.0, "hier_after": 0.0, "rec_after": 0.0}
    counts = {"all": 0, "after": 0}
    by_distance = {d: [0.0, 0.0, 0] for d in DISTANCES}  # HierGen NLL, RecGen NLL, tokens
    for i in range(0, len(segments), batch_size):
        group = segments[i:i + batch_size]
        tokens = padded(group)
        lengths = torch.tensor([len(s) for s in group])[:, None]
        positions = torch.arange(tokens.shape[1])[None, :]
        valid = (positions >= 1) & (positions < lengths)
        after = valid & (positions >= prompt_tokens)
        teacher = model.forward_batch(tokens)[0]
        nll = F.cross_entropy(teacher.transpose(1, 2), tokens, reduction="none")
        sums["all"] += float((nll * valid).sum())
        sums["hier_after"] += float((nll * after).sum())
        counts["all"] += int(valid.sum())
        counts["after"] += int(after.sum())
        logits, first, _ = model.recgen_batch(tokens, prompt_tokens)
        rec = F.cross_entropy(logits.transpose(1, 2), tokens[:, first:], reduction="none")
        sums["rec_after"] += float((rec * after[:, first:]).sum())
        distance = positions[:, first:] - prompt_tokens
        for low, high in DISTANCES:
            chosen = after[:, first:] & (distance >= low) & (distance < high)
            entry = by_distance[(low, high)]
            entry[0] += float((nll[:, first:] * chosen).sum())
            entry[1] += float((rec * chosen).sum())
            entry[2] += int(chosen.sum())
    hier_after = math.exp(sums["hier_after"] / counts["after"])
    rec = math.exp(sums["rec_after"] / counts["after"])
    return {"hiergen_ppl": math.exp(sums["all"] / counts["all"]),
            "hiergen_ppl_after_prompt": hier_after, "recgen_ppl": rec,
            "recgen_ratio": rec / hier_after, "tokens": counts["all"],
            "recgen_ratio_by_distance": {f"{low}-{high - 1}": math.exp((r - h) / n)
                                         for (low, high), (h, r, n) in by_distance.items() if n},
            "tokens_after_prompt": counts["after"]}


@torch.no_grad()
def greedy_recgen(model, prompts, n):
    """The latents above level 1 depend on the prompt alone, so every level-1 window of the
    continuation decodes at once: pass j fixes the j-th token of every window."""
    K = len(prompts[0])
    tokens = torch.cat([torch.tensor(prompts, dtype=torch.long),
                        torch.full((len(prompts), n), PAD, dtype=torch.long)], dim=1)
    C1 = model.config.level(1).chunk_len
    for _ in range(C1):
        logits, first, _ = model.recgen_batch(tokens, K)
        choice = logits.argmax(dim=-1)
        tokens[:, K:] = choice[:, K - first:]
    return tokens[:, K:]


def agreement(model, segments, prompt_tokens, n, prompts=0):
    chosen = [s[:prompt_tokens] for s in segments if len(s) >= prompt_tokens]
    if prompts:
        chosen = chosen[:prompts]
    hier = hiergen_greedy(model, torch.tensor(chosen, dtype=torch.long), n)
    rec = greedy_recgen(model, chosen, n)
    same = hier == rec
    prefix = [int(row.tolist().index(False)) if not bool(row.all()) else n for row in same]
    return {"token_agreement": float(same.float().mean()),
            "mean_common_prefix": float(np.mean(prefix)), "prompts": len(chosen)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.recgen_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=pathlib.Path,
                        help="PHOTON L >= 2 run directories or .photon files")
    parser.add_argument("--photon", default="build/bin/photon", help="reads .photon files")
    parser.add_argument("--corpus", default="out/train/corpus", type=pathlib.Path)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--continuation", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=0, help="at most this many (0: all)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    segments = test_segments(args.corpus)
    for run_dir in args.runs:
        model = (load_photon_file(args.photon, run_dir, torch.float32)
                 if run_dir.suffix == ".photon" else load_run(run_dir))
        result = {"run": str(run_dir), **perplexities(model, segments, args.prompt_tokens),
                  **agreement(model, segments, args.prompt_tokens, args.continuation,
                              args.prompts)}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
