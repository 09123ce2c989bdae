#!/usr/bin/python3
"""Live comparison of the built `photon` CLI with the PyTorch reference on fresh random models.

For PHOTON models of L = 1, 2, 3 and vanilla models (fixed seeds, none of them a golden case):
writes config.json + weights.npz, converts them with `photon convert`, and compares `photon score
--json` and `photon generate --json` (greedy HierGen, and RecGen for L >= 2) with photon_ref, token
ids exactly and log probabilities within 1e-4; for L >= 2 also `photon score --mode recgen
--prompt-tokens K` (a known continuation consumed as RecGen consumes its samples) at each RecGen
prompt length K. Short models check every RecGen prompt length up to
2 B_L + 1; long models use sequences that cross every batching limit of the engine with margin
(engine_limits.py): the score of a sequence spanning several passes of top-level windows, and
generation after prompts spanning several prefill slices. Short models also give each position's
most likely tokens (`photon score --top-logprobs`) against the reference's distribution. Short models also generate under a
repetition penalty, against the penalty written out from its definition in photon.h.

    /usr/bin/python3 tests/reference/compare_engine.py --photon build/bin/photon --work-dir /tmp/w
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_limits import long_lengths, meta_tokens  # noqa: E402
from photon_ref import (RecGenPlan, generate_hiergen, generate_recgen, greedy,  # noqa: E402
                        load_model, score, score_recgen, teacher_forced_logits)
from photon_ref.random_weights import write_random_model  # noqa: E402

TOLERANCE = 1e-4
# RecGen scoring runs every later token through reconstructions of reconstructions, so float32
# rounding grows with the magnitude of the logits: the tokens a random model finds least likely
# (log p near -15 to -30) are within 1e-5 of their value rather than 1e-4 absolute (measured on
# live_photon_l2: at most 7e-6 relative, and 2e-5 absolute where log p > -10).
RECGEN_SCORE_RTOL = 1e-5
# The long models' plain scores (thousands of tokens through every level) are long chains of f32
# sums as well: at log p near -16 their rounding crosses 1e-4 absolute while staying within 1e-5
# relative (live_long_photon_l3: at most 1.1e-4 absolute, 9.2e-6 relative, mean 2e-6 absolute).
LONG_SCORE_RTOL = 1e-5
MIN_MARGIN = 1e-3  # a greedy step closer than this to a tie would make the comparison flaky
GENERATE = 16
SMALL_VOCAB = 320  # the pieces of tests/data/tiny.model


def stack(layers, heads, kv_heads, head_dim, ffn_dim):
    return {"layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "ffn_dim": ffn_dim}


def level(chunk_len, chunker, dim, prefix_len, encoder, decoder):
    return {"chunk_len": chunk_len, "chunker": chunker, "dim": dim, "prefix_len": prefix_len,
            "encoder": encoder, "decoder": decoder}


def photon_config(levels, embed_dim=4, token_dim=8, vocab=SMALL_VOCAB, max_seq_len=8192,
                  theta=10000.0):
    return {"arch": "photon", "vocab_size": vocab, "embed_dim": embed_dim, "token_dim": token_dim,
            "max_seq_len": max_seq_len, "norm_eps": 1e-5, "rope_theta": theta, "levels": levels}


def vanilla(dim, layers, heads, kv_heads, head_dim, ffn_dim, vocab, max_seq_len, eps, theta):
    return {"arch": "vanilla", "vocab_size": vocab, "dim": dim, "layers": layers, "heads": heads,
            "kv_heads": kv_heads, "head_dim": head_dim, "ffn_dim": ffn_dim, "norm_eps": eps,
            "rope_theta": theta, "max_seq_len": max_seq_len}


# name -> (seed, "short" or "long", config).
MODELS = {
    "live_photon_l2": (9001, "short", photon_config([
        level(4, "concat", 32, 2, stack(1, 4, 2, 8, 48), stack(2, 6, 3, 4, 40)),
        level(2, "linear", 40, 1, stack(2, 2, 1, 16, 64), stack(1, 4, 4, 8, 48))],
        embed_dim=8, token_dim=24, vocab=512, max_seq_len=256, theta=500.0)),
    "live_vanilla": (9002, "short", vanilla(32, 3, 8, 2, 6, 72, 512, 256, 1e-6, 10000.0)),
    "live_photon_l3": (9003, "short", photon_config([
        level(2, "linear", 8, 2, stack(1, 2, 1, 4, 16), stack(1, 2, 2, 4, 16)),
        level(2, "concat", 16, 1, stack(1, 2, 2, 4, 16), stack(2, 2, 1, 4, 16)),
        level(3, "linear", 12, 2, stack(1, 2, 1, 4, 16), stack(1, 2, 2, 4, 16))],
        max_seq_len=256)),
    # Chunk lengths 2 keep the sequences that cross a pass of top-level windows short.
    "live_long_vanilla": (9011, "long", vanilla(8, 2, 2, 2, 4, 16, SMALL_VOCAB, 2048, 1e-5, 1e4)),
    "live_long_block": (9012, "long", photon_config([
        level(2, "linear", 8, 1, stack(2, 2, 1, 4, 16), stack(1, 2, 2, 4, 16))],
        max_seq_len=2048)),
    "live_long_photon_l2": (9013, "long", photon_config([
        level(2, "concat", 8, 2, stack(1, 2, 2, 4, 16), stack(1, 2, 1, 4, 16)),
        level(2, "linear", 12, 1, stack(1, 2, 1, 4, 16), stack(1, 2, 2, 4, 16))],
        max_seq_len=4096)),
    "live_long_photon_l3": (9014, "long", photon_config([
        level(2, "linear", 8, 2, stack(1, 2, 1, 4, 16), stack(1, 2, 2, 4, 16)),
        level(2, "concat", 16, 1, stack(1, 2, 2, 4, 16), stack(1, 2, 1, 4, 16)),
        level(2, "linear", 8, 2, stack(1, 2, 1, 4, 16), stack(1, 2, 2, 4, 16))])),
}


class Mismatch(Exception):
    pass


def run(args):
    # Generated text from random token ids need not be valid UTF-8; only the JSON line matters.
    result = subprocess.run(args, capture_output=True)
    if result.returncode != 0:
        raise Mismatch(f"{' '.join(args)} exited with {result.returncode}:\n"
                       f"{result.stderr.decode(errors='replace')}")
    return result.stdout.decode(errors="replace")


def compare_logprobs(what, engine, reference, rtol=0.0):
    """Each engine value within TOLERANCE + rtol |reference| of the reference's."""
    if len(engine) != len(reference):
        raise Mismatch(f"{what}: engine gave {len(engine)} values, reference {len(reference)}")
    for i, (e, r) in enumerate(zip(engine, reference)):
        if r is None or e is None:
            if r is not e:
                raise Mismatch(f"{what}[{i}]: engine {e}, reference {r}")
        elif abs(e - r) > TOLERANCE + rtol * abs(r):
            raise Mismatch(f"{what}[{i}]: engine {e}, reference {r} (|diff| {abs(e - r):.2e})")


def check_generation(photon, model_path, model, what, mode, prompt, n):
    generate = generate_recgen if mode == "recgen" else generate_hiergen
    expected = generate(model, prompt, n)
    if min(expected["margins"]) <= MIN_MARGIN:
        raise Mismatch(f"{what}: the reference's greedy path nears a tie (margin "
                       f"{min(expected['margins']):.1e}); choose another seed")
    stdout = run([photon, "generate", "-m", model_path, "--tokens", ",".join(map(str, prompt)),
                  "-n", str(n), "--mode", mode, "--ignore-eos", "--json"])
    got = json.loads(stdout.strip().splitlines()[-1])
    for i, (e, r) in enumerate(zip(got["tokens"], expected["tokens"])):
        if e != r:
            raise Mismatch(f"{what}: first differing token at step {i}: engine {e}, "
                           f"reference {r}")
    if len(got["tokens"]) != n:
        raise Mismatch(f"{what}: engine generated {len(got['tokens'])} tokens")
    compare_logprobs(what, got["logprobs"], expected["logprobs"])


def penalized_greedy(model, mode, prompt, n, penalty, last_n):
    """Greedy decoding under a CTRL repetition penalty, written out here from the API's definition
    (photon.h): each distinct token among the last last_n of the history has its logit divided by
    the penalty if positive, multiplied if not; the reported log probability is that of the
    model's unmodified distribution."""
    tokens, out, logprobs, margins = list(prompt), [], [], []
    plan = RecGenPlan(model, prompt) if mode == "recgen" else None
    with torch.no_grad():
        for _ in range(n):
            raw = plan.next_logits(tokens) if plan else model.next_logits(tokens)
            logits = raw.clone()
            for t in set(tokens[-last_n:]):
                logits[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
            token, _, margin = greedy(logits)
            tokens.append(token)
            out.append(token)
            logprobs.append(float(torch.log_softmax(raw, dim=-1)[token]))
            margins.append(margin)
    return {"tokens": out, "logprobs": logprobs, "margins": margins}


def check_penalized(photon, model_path, model, name, mode, prompt):
    """A strong penalty over a short window changes the greedy path; the engine must follow the
    reference's, reporting the unpenalized log probabilities."""
    penalty, last_n = 3.0, 8
    what = f"{name} {mode} with repetition penalty (prompt length {len(prompt)})"
    expected = penalized_greedy(model, mode, prompt, GENERATE, penalty, last_n)
    if min(expected["margins"]) <= MIN_MARGIN:
        raise Mismatch(f"{what}: the reference's greedy path nears a tie; choose another prompt")
    plain = (generate_recgen if mode == "recgen" else generate_hiergen)(model, prompt, GENERATE)
    if plain["tokens"] == expected["tokens"]:
        raise Mismatch(f"{what}: the penalty does not change the greedy path; make it stronger")
    stdout = run([photon, "generate", "-m", model_path, "--tokens", ",".join(map(str, prompt)),
                  "-n", str(GENERATE), "--mode", mode, "--ignore-eos", "--json",
                  "--repeat-penalty", str(penalty), "--repeat-last-n", str(last_n)])
    got = json.loads(stdout.strip().splitlines()[-1])
    if got["tokens"] != expected["tokens"]:
        raise Mismatch(f"{what}: engine {got['tokens']}, reference {expected['tokens']}")
    compare_logprobs(what, got["logprobs"], expected["logprobs"])


def check_recgen_scores(photon, model_path, model, name, tokens, prompt_lengths, continuation):
    """`photon score --mode recgen --prompt-tokens K`: the sequence as a RecGen session with the
    first K tokens as its prompt consumes it, against photon_ref.score_recgen (spec section 5).
    Only `continuation` tokens after the prompt are scored (None: to the end): each top unit after
    the prompt is encoded from reconstructions of the one before, so float32 rounding compounds
    along the continuation, and a random model amplifies it (relative differences grew from 1e-6
    to 4e-5 a hundred tokens after the prompt). Two top units and more exercise every index."""
    for k in prompt_lengths:
        scored = tokens if continuation is None else tokens[:k + continuation]
        engine = json.loads(run([photon, "score", "-m", model_path, "--mode", "recgen",
                                 "--prompt-tokens", str(k), "--tokens",
                                 ",".join(map(str, scored)), "--json"]))
        compare_logprobs(f"{name} recgen score (prompt tokens {k})", engine["logprobs"],
                         score_recgen(model, scored, k), RECGEN_SCORE_RTOL)


def check_alternatives(photon, model_path, model, name, tokens, plain, k=5):
    """`photon score --top-logprobs K`: each position's K most likely tokens against the
    reference's distribution (ids in order, except where two neighbours are within MIN_MARGIN of a
    tie; log probabilities within TOLERANCE), the same logprobs as without alternatives, and each
    token's logprob equal to its own entry among them (a greedy check compares the two)."""
    engine = json.loads(run([photon, "score", "-m", model_path, "--tokens",
                             ",".join(map(str, tokens)), "--top-logprobs", str(k), "--json"]))
    what = f"{name} score --top-logprobs {k}"
    if engine["logprobs"] != plain:
        raise Mismatch(f"{what}: the logprobs differ from those scored without alternatives")
    top = engine["top_logprobs"]
    if len(top) != len(tokens) or top[0] is not None:
        raise Mismatch(f"{what}: {len(top)} rows for {len(tokens)} tokens, the first {top[0]}")
    rows = torch.log_softmax(teacher_forced_logits(model, tokens), dim=-1)
    for i in range(1, len(tokens)):
        row = rows[i - 1]
        values, ids = torch.sort(row, descending=True, stable=True)
        got = top[i]
        if len(got) != k:
            raise Mismatch(f"{what}: position {i} has {len(got)} alternatives")
        for j, (token, logprob) in enumerate(got):
            near_tie = any(abs(float(values[j]) - float(values[n])) < MIN_MARGIN
                           for n in (j - 1, j + 1) if 0 <= n < len(values))
            if token != int(ids[j]) and not near_tie:
                raise Mismatch(f"{what}: position {i} alternative {j} is {token}, reference "
                               f"{int(ids[j])}")
            if abs(logprob - float(row[token])) > TOLERANCE:
                raise Mismatch(f"{what}: position {i} token {token} logprob {logprob}, reference "
                               f"{float(row[token])}")
            if token == tokens[i] and logprob != engine["logprobs"][i]:
                raise Mismatch(f"{what}: position {i}: the token's logprob "
                               f"{engine['logprobs'][i]} differs from its alternative {logprob}")


def check_model(photon, work_dir, name, seed, plan, config_json):
    directory = os.path.join(work_dir, name)
    config_path, weights_path = write_random_model(directory, config_json, seed)
    model_path = os.path.join(directory, "model.photon")
    run([photon, "convert", "--config", config_path, "--weights", weights_path,
         "--tokenizer", os.path.join(ROOT, "tests", "data", "tiny.model"), "-o", model_path])
    model = load_model(config_path, weights_path)
    rng = np.random.default_rng(seed)
    vocab = config_json["vocab_size"]

    def random_tokens(n):
        return [1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)]

    B = meta_tokens(config_json)
    if plan == "long":
        n_score, base = long_lengths(config_json)
        tokens = random_tokens(n_score)
        # HierGen just after and just before a top-level boundary; RecGen at its first, a middle
        # and its last offset; each past the next boundary.
        hier_prompts = [tokens[:base + k] for k in (1, B - 1)]
        rec_prompts = [tokens[:base + k] for k in sorted({1, B // 2 + 1, B})]
        n_gen = B + 2
    else:
        tokens = random_tokens(45)
        hier_prompts = [random_tokens(n) for n in (1, 6, 11, 16)]
        rec_prompts = hier_prompts
        if config_json["arch"] == "photon" and len(config_json["levels"]) >= 3:
            # Three levels: every prompt length, so plans pick every child at every level.
            base = random_tokens(2 * B + 1)
            rec_prompts = [base[:n] for n in range(1, 2 * B + 2)]
        n_gen = GENERATE
    engine = json.loads(run([photon, "score", "-m", model_path, "--tokens",
                             ",".join(map(str, tokens)), "--json"]))
    reference = score(model, tokens)
    compare_logprobs(f"{name} score", engine["logprobs"], reference,
                     LONG_SCORE_RTOL if plan == "long" else 0.0)
    if abs(engine["nll"] + sum(reference[1:])) > TOLERANCE * len(tokens):
        raise Mismatch(f"{name} score: nll {engine['nll']}, reference {-sum(reference[1:])}")
    if plan == "short":
        # The reference's own command line gives the same numbers as the package.
        cli = json.loads(subprocess.run(
            [sys.executable, "-m", "photon_ref", "score", "--config", config_path, "--weights",
             weights_path, "--tokens", ",".join(map(str, tokens))], capture_output=True,
            text=True, check=True,
            env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))).stdout)
        if cli["logprobs"] != reference:
            raise Mismatch(f"{name}: python -m photon_ref score disagrees with photon_ref.score")
        check_alternatives(photon, model_path, model, name, tokens, engine["logprobs"])

    checks = [("hiergen", p) for p in hier_prompts]
    if config_json["arch"] == "photon" and len(config_json["levels"]) >= 2:
        checks += [("recgen", p) for p in rec_prompts]
        check_recgen_scores(photon, model_path, model, name, tokens,
                            sorted({len(p) for p in rec_prompts} | {len(tokens)}),
                            None if plan == "short" else 2 * B + 2)
    for mode, prompt in checks:
        check_generation(photon, model_path, model,
                         f"{name} {mode} (prompt length {len(prompt)})", mode, prompt, n_gen)
    if plan == "short":
        for mode in sorted({mode for mode, _ in checks}):
            check_penalized(photon, model_path, model, name, mode, hier_prompts[-1])
            checks.append((mode + " penalized", hier_prompts[-1]))
    print(f"{name}: scores of {len(tokens)} tokens and {len(checks)} generations agree")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True, help="the built photon CLI")
    parser.add_argument("--work-dir", required=True, help="scratch directory for the models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = 0
    for name, (seed, plan, config_json) in MODELS.items():
        try:
            check_model(args.photon, args.work_dir, name, seed, plan, config_json)
        except Mismatch as e:
            print(f"MISMATCH {e}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
