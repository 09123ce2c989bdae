#!/usr/bin/python3
"""The sampling options end to end: `photon generate` with temperature, top-k, top-p, min-p, the
repetition, presence and frequency penalties and a logit bias against the distribution
include/photon.h defines, computed here in float64 from
the PyTorch reference's logits (python/photon_ref), independently of src/engine/sampler.cpp.

Per setting, a few seeds each generate a long sequence from a random vanilla model; the reference
recomputes every step's logits from the engine's own history (vanilla decoding equals teacher
forcing). Checked: no token lies outside the step's kept set; the tokens' frequencies pass a
chi-square test (tokens binned by their rank at each step, tail probability 1e-6); and each token's
reported logprob is its log-probability under the unmodified distribution.

    /usr/bin/python3 tests/reference/test_sampling.py --photon build/bin/photon --work-dir /tmp/w
"""

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from photon_ref import load_model, teacher_forced_logits  # noqa: E402
from photon_ref.random_weights import write_random_model  # noqa: E402

CONFIG = {"arch": "vanilla", "vocab_size": 512, "dim": 32, "layers": 2, "heads": 4, "kv_heads": 2,
          "head_dim": 8, "ffn_dim": 64, "norm_eps": 1e-5, "rope_theta": 10000.0,
          "max_seq_len": 512}
SEEDS = (11, 12, 13)
GENERATE = 240
# Engine (float32) and reference (float64) logits differ by about 1e-5: a token whose membership
# in the kept set is decided by less than this is allowed either way.
MARGIN = 1e-3
RANK_BINS = (0, 1, 2, 3, 5, 10, 20)  # bin b holds the ranks RANK_BINS[b] .. RANK_BINS[b+1] - 1


class Setting:
    def __init__(self, name, temperature, top_k=0, top_p=1.0, min_p=0.0, penalty=1.0, last_n=64,
                 presence=0.0, frequency=0.0, bias=None):
        self.name, self.temperature, self.top_k = name, temperature, top_k
        self.top_p, self.min_p, self.penalty, self.last_n = top_p, min_p, penalty, last_n
        self.presence, self.frequency, self.bias = presence, frequency, bias or {}

    def flags(self):
        return (["--temperature", str(self.temperature), "--top-k", str(self.top_k),
                 "--top-p", str(self.top_p), "--min-p", str(self.min_p),
                 "--repeat-penalty", str(self.penalty), "--repeat-last-n", str(self.last_n),
                 "--presence-penalty", str(self.presence),
                 "--frequency-penalty", str(self.frequency)]
                + [f for t, b in self.bias.items() for f in ("--logit-bias", f"{t}={b}")])


SETTINGS = [
    Setting("temperature 0.6", 0.6),
    Setting("temperature 1.8", 1.8),
    Setting("top-k 8", 0.8, top_k=8),
    Setting("top-p 0.8", 1.3, top_p=0.8),
    Setting("min-p 0.1", 1.5, min_p=0.1),
    Setting("top-k 30, top-p 0.9, min-p 0.02", 1.2, top_k=30, top_p=0.9, min_p=0.02),
    Setting("penalty 1.5 over 16", 0.9, penalty=1.5, last_n=16),
    Setting("penalty 2 over 64, top-k 20, top-p 0.95", 1.1, top_k=20, top_p=0.95, penalty=2.0),
    Setting("presence 0.6, frequency 0.4 over 32", 1.0, last_n=32, presence=0.6, frequency=0.4),
    Setting("logit bias, frequency 0.3, top-k 30", 0.9, top_k=30, frequency=0.3,
            bias={7: 3.0, 260: -100.0, 400: 2.0}),
]


def f32(x):
    """The option as the engine holds it (a C float)."""
    return float(np.float32(x))


def distribution(logits, history, s):
    """The step's distribution per photon.h: (p over the vocabulary, 0 outside the kept set; the
    tokens whose membership is within MARGIN of a threshold; the tokens ordered by rank)."""
    z = logits.copy()
    for t, b in s.bias.items():
        z[t] += f32(b)
    if s.last_n > 0:
        window = history[-s.last_n:]
        for t in set(window):
            z[t] = z[t] / f32(s.penalty) if z[t] > 0 else z[t] * f32(s.penalty)
            z[t] -= f32(s.presence) + window.count(t) * f32(s.frequency)
    vocab = len(z)
    order = np.lexsort((np.arange(vocab), -z))  # by logit, descending; ties by id
    zs = z[order]
    n = s.top_k if 0 < s.top_k < vocab else vocab
    unclear = set()
    if n < vocab:
        unclear |= {int(order[i]) for i in range(vocab) if abs(zs[i] - zs[n - 1]) < MARGIN
                    or abs(zs[i] - zs[n]) < MARGIN}
    q = np.exp((zs[:n] - zs[0]) / f32(s.temperature))
    q /= q.sum()
    keep = n
    if s.min_p > 0:
        keep = min(keep, int(np.sum(q >= f32(s.min_p) * q[0])))
        unclear |= {int(order[i]) for i in range(n) if abs(q[i] / q[0] - f32(s.min_p)) < MARGIN}
    if s.top_p < 1:
        cumulative = np.cumsum(q)
        keep = min(keep, int(np.searchsorted(cumulative, f32(s.top_p))) + 1)
        unclear |= {int(order[i]) for i in range(n)
                    if abs(cumulative[i] - q[i] - f32(s.top_p)) < MARGIN}
    keep = max(keep, 1)
    p = np.zeros(vocab)
    p[order[:keep]] = q[:keep] / q[:keep].sum()
    return p, unclear, order


def chi_square_limit(dof):
    """Upper 1e-6 quantile of chi-square(dof) (Wilson-Hilferty)."""
    z = 4.753
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def run(args):
    result = subprocess.run([str(a) for a in args], capture_output=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} exited with {result.returncode}:\n"
                         f"{result.stderr.decode(errors='replace')}")
    return result.stdout.decode(errors="replace")


def check_setting(photon, model_path, model, prompt, s):
    """Returns the failures of one setting (empty if it passes)."""
    failures = []
    expected = np.zeros(len(RANK_BINS))
    observed = np.zeros(len(RANK_BINS))
    unclear_picks = 0
    steps = 0
    for seed in SEEDS:
        out = run([photon, "generate", "-m", model_path, "--tokens", ",".join(map(str, prompt)),
                   "-n", GENERATE, "--ignore-eos", "--json", "--seed", seed] + s.flags())
        got = json.loads(out.strip().splitlines()[-1])
        tokens = prompt + got["tokens"]
        if len(got["tokens"]) != GENERATE or len(got["logprobs"]) != GENERATE:
            failures.append(f"seed {seed}: {len(got['tokens'])} tokens, "
                            f"{len(got['logprobs'])} logprobs instead of {GENERATE}")
            continue
        logits = teacher_forced_logits(model, tokens).numpy()
        for i, token in enumerate(got["tokens"]):
            j = len(prompt) + i  # the token's index in the sequence; logits row j - 1 predicts it
            p, unclear, order = distribution(logits[j - 1], tokens[:j], s)
            logprob = float(torch.log_softmax(torch.from_numpy(logits[j - 1]), 0)[token])
            if abs(got["logprobs"][i] - logprob) > 1e-3:
                failures.append(f"seed {seed} step {i}: logprob {got['logprobs'][i]}, "
                                f"reference {logprob}")
            if p[token] == 0:
                if token in unclear:
                    unclear_picks += 1
                else:
                    failures.append(f"seed {seed} step {i}: token {token} lies outside the kept "
                                    f"set {sorted(np.nonzero(p)[0].tolist())}")
                continue
            rank = int(np.nonzero(order == token)[0][0])
            observed[np.searchsorted(RANK_BINS, rank, side="right") - 1] += 1
            for b, low in enumerate(RANK_BINS):
                high = RANK_BINS[b + 1] if b + 1 < len(RANK_BINS) else len(order)
                expected[b] += p[order[low:high]].sum()
            steps += 1
    # Pool the bins from the tail until each expects at least 5.
    bins = []
    e_acc = o_acc = 0.0
    for e, o in zip(expected[::-1], observed[::-1]):
        e_acc, o_acc = e_acc + e, o_acc + o
        if e_acc >= 5:
            bins.append((e_acc, o_acc))
            e_acc = o_acc = 0.0
    if bins and e_acc > 0:  # a remainder joins the last bin formed
        e, o = bins.pop()
        bins.append((e + e_acc, o + o_acc))
    statistic = sum((o - e) ** 2 / e for e, o in bins)
    limit = chi_square_limit(len(bins) - 1) if len(bins) > 1 else float("inf")
    summary = (f"{s.name}: {steps} tokens, chi-square {statistic:.1f} over {len(bins)} rank bins "
               f"(limit {limit:.1f}), observed {observed.astype(int).tolist()}, expected "
               f"{np.round(expected, 1).tolist()}, {unclear_picks} picks at a threshold")
    print(summary)
    if statistic >= limit:
        failures.append(f"frequencies do not follow the reference distribution: {summary}")
    if unclear_picks > steps // 100:
        failures.append(f"{unclear_picks} picks lie within rounding of a threshold: choose another "
                        f"model seed")
    return [f"{s.name}: {f}" for f in failures]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True, help="the built photon CLI")
    parser.add_argument("--work-dir", required=True, help="scratch directory for the model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config_path, weights_path = write_random_model(args.work_dir, CONFIG, 4242, logit_scale=2.5)
    model_path = os.path.join(args.work_dir, "model.photon")
    run([args.photon, "convert", "--config", config_path, "--weights", weights_path,
         "--tokenizer", os.path.join(ROOT, "tests", "data", "tiny.model"), "-o", model_path])
    model = load_model(config_path, weights_path)
    prompt = [1, 17, 301, 45, 99, 260]
    failures = []
    for s in SETTINGS:
        failures += check_setting(args.photon, model_path, model, prompt, s)
    for f in failures[:20]:
        print("FAIL " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
