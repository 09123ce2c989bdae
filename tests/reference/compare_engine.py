#!/usr/bin/python3
"""Live comparison of the built `photon` CLI with the PyTorch reference on fresh random models.

For a PHOTON L = 2 model and a vanilla model (fixed seeds, none of them a golden case): writes
config.json + weights.npz, converts them with `photon convert`, and compares `photon score --json`
and `photon generate --json` (greedy HierGen, and RecGen for PHOTON) with photon_ref, token ids
exactly and log probabilities within 1e-4.

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
from photon_ref import generate_hiergen, generate_recgen, load_model, score  # noqa: E402
from photon_ref.random_weights import write_random_model  # noqa: E402

TOLERANCE = 1e-4
MIN_MARGIN = 1e-3  # a greedy step closer than this to a tie would make the comparison flaky
GENERATE = 16


def stack(layers, heads, kv_heads, head_dim, ffn_dim):
    return {"layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "ffn_dim": ffn_dim}


MODELS = {
    "live_photon_l2": (9001, {
        "arch": "photon", "vocab_size": 512, "embed_dim": 8, "token_dim": 24, "max_seq_len": 256,
        "norm_eps": 1e-5, "rope_theta": 500.0,
        "levels": [
            {"chunk_len": 4, "chunker": "concat", "dim": 32, "prefix_len": 2,
             "encoder": stack(1, 4, 2, 8, 48), "decoder": stack(2, 6, 3, 4, 40)},
            {"chunk_len": 2, "chunker": "linear", "dim": 40, "prefix_len": 1,
             "encoder": stack(2, 2, 1, 16, 64), "decoder": stack(1, 4, 4, 8, 48)}]}),
    "live_vanilla": (9002, {
        "arch": "vanilla", "vocab_size": 512, "dim": 32, "layers": 3, "heads": 8, "kv_heads": 2,
        "head_dim": 6, "ffn_dim": 72, "norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_seq_len": 256}),
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


def compare_logprobs(what, engine, reference):
    if len(engine) != len(reference):
        raise Mismatch(f"{what}: engine gave {len(engine)} values, reference {len(reference)}")
    for i, (e, r) in enumerate(zip(engine, reference)):
        if r is None or e is None:
            if r is not e:
                raise Mismatch(f"{what}[{i}]: engine {e}, reference {r}")
        elif abs(e - r) > TOLERANCE:
            raise Mismatch(f"{what}[{i}]: engine {e}, reference {r} (|diff| {abs(e - r):.2e})")


def check_model(photon, work_dir, name, seed, config_json):
    directory = os.path.join(work_dir, name)
    config_path, weights_path = write_random_model(directory, config_json, seed)
    model_path = os.path.join(directory, "model.photon")
    run([photon, "convert", "--config", config_path, "--weights", weights_path,
         "--tokenizer", os.path.join(ROOT, "tests", "data", "tiny.model"), "-o", model_path])
    model = load_model(config_path, weights_path)
    rng = np.random.default_rng(seed)

    def random_tokens(n):
        return [1] + [int(t) for t in rng.integers(3, 512, size=n - 1)]

    tokens = random_tokens(45)
    engine = json.loads(run([photon, "score", "-m", model_path, "--tokens",
                             ",".join(map(str, tokens)), "--json"]))
    reference = score(model, tokens)
    compare_logprobs(f"{name} score", engine["logprobs"], reference)
    if abs(engine["nll"] + sum(reference[1:])) > TOLERANCE * len(tokens):
        raise Mismatch(f"{name} score: nll {engine['nll']}, reference {-sum(reference[1:])}")
    # The reference's own command line gives the same numbers as the package.
    cli = json.loads(subprocess.run(
        [sys.executable, "-m", "photon_ref", "score", "--config", config_path, "--weights",
         weights_path, "--tokens", ",".join(map(str, tokens))], capture_output=True, text=True,
        check=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))).stdout)
    if cli["logprobs"] != reference:
        raise Mismatch(f"{name}: python -m photon_ref score disagrees with photon_ref.score")

    modes = [("hiergen", generate_hiergen)]
    if config_json["arch"] == "photon":
        modes.append(("recgen", generate_recgen))
    checked = 0
    for prompt_len in (1, 6, 11, 16):
        prompt = random_tokens(prompt_len)
        for mode, generate in modes:
            what = f"{name} {mode} (prompt length {prompt_len})"
            expected = generate(model, prompt, GENERATE)
            if min(expected["margins"]) <= MIN_MARGIN:
                raise Mismatch(f"{what}: the reference's greedy path nears a tie (margin "
                               f"{min(expected['margins']):.1e}); choose another seed")
            stdout = run([photon, "generate", "-m", model_path, "--tokens",
                          ",".join(map(str, prompt)), "-n", str(GENERATE), "--mode", mode,
                          "--ignore-eos", "--json"])
            got = json.loads(stdout.strip().splitlines()[-1])
            for i, (e, r) in enumerate(zip(got["tokens"], expected["tokens"])):
                if e != r:
                    raise Mismatch(f"{what}: first differing token at step {i}: engine {e}, "
                                   f"reference {r}")
            if len(got["tokens"]) != GENERATE:
                raise Mismatch(f"{what}: engine generated {len(got['tokens'])} tokens")
            compare_logprobs(what, got["logprobs"], expected["logprobs"])
            checked += 1
    print(f"{name}: score of {len(tokens)} tokens and {checked} generations agree")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True, help="the built photon CLI")
    parser.add_argument("--work-dir", required=True, help="scratch directory for the models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = 0
    for name, (seed, config_json) in MODELS.items():
        try:
            check_model(args.photon, args.work_dir, name, seed, config_json)
        except Mismatch as e:
            print(f"MISMATCH {e}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
