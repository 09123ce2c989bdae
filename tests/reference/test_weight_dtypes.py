#!/usr/bin/python3
"""Models stored in f32, f16, bf16 and q8 against the PyTorch float64 reference (python/photon_ref).

For a vanilla and a two-level PHOTON model (fixed seeds), and for q8 a vanilla and a PHOTON model
whose widths are mostly multiples of 32 (q8 rows are whole blocks of 32; other matrices are
stored in f16, vectors in f32): `photon convert --dtype D` of float32 weights, then
`photon score --json` of a short sequence (few rows: the skinny kernels) and of a long one (many
rows: the GEMM path), and greedy `photon generate --json` (one row per step), each compared with
photon_ref run on the same weights rounded to D (NumPy's float16, PyTorch's bfloat16: what photon
convert stores, see test_convert_rounding.py; q8 blocks quantized here from their definition in
docs/model-files.md) within 1e-4, token ids exactly. The engine computes stored weights in place
with f32 arithmetic, so only the arithmetic may differ. Then the scores of each narrow dtype
against the reference on the unrounded f32 weights, in units u of the weights' relative rounding
(2^-12 f16, 2^-9 bf16; q8: 2^-8, its step being 1/127 of the block's largest value): the median
within 64 u and the worst within 512 u (measured: medians 10 to 25 u; the worst 48 to 64 u for
vanilla, up to 422 u for the PHOTON model, where the reference itself moves as much when its
weights are rounded, and f16's subnormal small weights lose more than u), and f16's median closer
than bf16's, as rounding predicts. Last, the f32 and bf16 files at bf16 precision (`photon score
--precision bf16`) against the reference whose products round their input to bfloat16
(photon_ref.bf16_products), and the q8 files at int8 precision against the reference whose
products quantize their input per block (photon_ref.int8_products): the median difference within
5e-3 and under a tenth of the median move from exact precision, the worst within 0.5 (PRECISION_*
below says why so wide).

    /usr/bin/python3 tests/reference/test_weight_dtypes.py --photon build/bin/photon --work-dir /tmp/w
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

from compare_engine import (ROOT, Mismatch, check_generation, compare_logprobs, level,
                            photon_config, run, stack, vanilla)
from rounding import to_bf16, to_f16

sys.path.insert(0, os.path.join(ROOT, "python"))
from photon_ref import bf16_products, int8_products, load_model, score  # noqa: E402
from photon_ref.random_weights import write_random_model  # noqa: E402

SIXTEEN = ("f32", "f16", "bf16")
# Widths that are not multiples of the kernels' vectors (8 or 16 lanes) or tiles, so that the
# tails are computed too; for q8, widths of whole blocks.
MODELS = {
    "dtypes_vanilla": (9101, vanilla(72, 2, 4, 2, 18, 200, 512, 512, 1e-5, 10000.0), SIXTEEN),
    "dtypes_photon_l2": (9102, photon_config([
        level(4, "concat", 32, 2, stack(1, 4, 2, 10, 104), stack(2, 6, 3, 6, 88)),
        level(2, "linear", 48, 1, stack(2, 2, 1, 24, 72), stack(1, 4, 4, 12, 56))],
        embed_dim=8, token_dim=24, vocab=512, max_seq_len=512, theta=500.0), SIXTEEN),
    "dtypes_vanilla_q8": (9103, vanilla(64, 2, 4, 2, 16, 96, 512, 512, 1e-5, 10000.0),
                          ("f32", "q8")),
    "dtypes_photon_q8": (9104, photon_config([
        level(4, "concat", 64, 2, stack(1, 4, 2, 16, 96), stack(2, 4, 4, 16, 64)),
        level(2, "linear", 64, 1, stack(2, 2, 1, 32, 128), stack(1, 4, 4, 16, 96))],
        embed_dim=16, token_dim=32, vocab=512, max_seq_len=512, theta=500.0), ("f32", "q8")),
}
UNIT = {"f16": 2.0**-12, "bf16": 2.0**-9, "q8": 2.0**-8}


def to_q8(w):
    """q8 as docs/model-files.md defines it, per block of 32 values of a row: d = max |w| / 127
    rounded to bf16, q = w / d rounded to nearest even and clamped to [-127, 127] (0 where d is 0),
    in float32; the values d q."""
    blocks = np.asarray(w, dtype=np.float32).reshape(-1, 32)
    d = to_bf16(np.abs(blocks).max(axis=1) / np.float32(127))[1][:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d == 0, np.float32(0), np.clip(np.rint(blocks / d), -127, 127))
    return (q * d).astype(np.float32).reshape(np.shape(w))


def stored_q8(w):
    """What a q8 file holds for a tensor: vectors in f32, matrices of whole blocks in q8, other
    matrices in f16."""
    if np.ndim(w) < 2:
        return w
    return to_q8(w) if np.shape(w)[-1] % 32 == 0 else to_f16(w)[1]


ROUND = {"f32": lambda w: w, "f16": lambda w: to_f16(w)[1], "bf16": lambda w: to_bf16(w)[1],
         "q8": stored_q8}
MEDIAN_UNITS, WORST_UNITS = 64, 512
# bf16 precision (--precision bf16) against the reference's bf16 products: the engine rounds its
# f32 activations, the reference its float64 ones, so an element within f32 rounding of a bf16
# tie may round the other way; one bf16 unit in one element then moves what follows, and on these
# small random models such flips reach a few tokens by up to about as much as bf16 precision moves
# them from exact. Most tokens see none: the median stays near f32 rounding (measured 4e-7 to
# 1e-6), except where a PHOTON model carries an early flip forward in its latents to every later
# token (measured once: 1.1e-3, against 2.7e-2 from exact). int8 precision (q8 files) against the
# reference's int8 products likewise: its steps, 1/127 of a block's largest value, are as coarse,
# and a value within f32 rounding of a half step may round the other way.
PRECISIONS = {"f32": ("bf16",), "bf16": ("bf16",), "q8": ("int8",)}
PRODUCTS = {"bf16": bf16_products, "int8": int8_products}
PRECISION_MEDIAN, PRECISION_WORST = 5e-3, 0.5
SHORT, LONG, GENERATE = 20, 150, 12


def engine_score(photon, model_path, tokens, precision="exact"):
    return json.loads(run([photon, "score", "-m", model_path, "--tokens",
                           ",".join(map(str, tokens)), "--precision", precision,
                           "--json"]))["logprobs"]


def differences(engine, reference):
    return [abs(e - r) for e, r in zip(engine[1:], reference[1:])]


def check_precision(photon, what, precision, model_path, rounded, seq, exact_engine):
    """The engine at `precision` against the reference whose products take their input as it
    does (photon_ref.bf16_products, photon_ref.int8_products): the median difference within
    PRECISION_MEDIAN and under a tenth of the median move from exact precision, the worst within
    PRECISION_WORST."""
    engine = engine_score(photon, model_path, seq, precision)
    with PRODUCTS[precision]():
        reference = score(rounded, seq)
    off = differences(engine, reference)
    moved = differences(engine, exact_engine)
    median, median_moved = float(np.median(off)), float(np.median(moved))
    print(f"{what} {precision} precision: |logprob - reference| median {median:.2e}, worst "
          f"{max(off):.2e}; from exact precision median {median_moved:.2e}, worst {max(moved):.2e}")
    if median > PRECISION_MEDIAN or max(off) > PRECISION_WORST:
        raise Mismatch(f"{what} {precision} precision: median {median:.2e} / worst "
                       f"{max(off):.2e} from the reference's {precision} products, beyond "
                       f"{PRECISION_MEDIAN:.0e} / {PRECISION_WORST:.0e}")
    if not median < median_moved / 10:
        raise Mismatch(f"{what} {precision} precision: median {median:.2e} from the reference's "
                       f"{precision} products, not a tenth of exact precision's "
                       f"{median_moved:.2e}")


def check_model(photon, work_dir, name, seed, config_json, dtypes):
    directory = os.path.join(work_dir, name)
    config_path, weights_path = write_random_model(directory, config_json, seed)
    rng = np.random.default_rng(seed)
    vocab = config_json["vocab_size"]
    tokens = [1] + [int(t) for t in rng.integers(3, vocab, size=LONG - 1)]
    sequences = {"short": tokens[:SHORT], "long": tokens}
    exact = load_model(config_path, weights_path)
    exact_scores = {what: score(exact, seq) for what, seq in sequences.items()}
    drift = {}
    with np.load(weights_path) as npz:
        f32_weights = {k: npz[k] for k in npz.files}
    for dtype in dtypes:
        model_path = os.path.join(directory, f"model-{dtype}.photon")
        run([photon, "convert", "--config", config_path, "--weights", weights_path, "--tokenizer",
             os.path.join(ROOT, "tests", "data", "tiny.model"), "--dtype", dtype, "-o",
             model_path])
        rounded_path = os.path.join(directory, f"weights-{dtype}.npz")
        np.savez(rounded_path, **{k: ROUND[dtype](w) for k, w in f32_weights.items()})
        rounded = load_model(config_path, rounded_path)
        for what, seq in sequences.items():
            engine = engine_score(photon, model_path, seq)
            compare_logprobs(f"{name} {dtype} {what} score", engine, score(rounded, seq))
            if dtype != "f32":
                drift.setdefault(dtype, []).extend(differences(engine, exact_scores[what]))
            for precision in PRECISIONS[dtype] if dtype in PRECISIONS else ():
                check_precision(photon, f"{name} {dtype} {what}", precision, model_path, rounded,
                                seq, engine)
        modes = ["hiergen"] + (["recgen"] if config_json["arch"] == "photon" else [])
        for mode in modes:
            check_generation(photon, model_path, rounded, f"{name} {dtype} {mode}", mode,
                             tokens[:11], GENERATE)
    median = {dtype: float(np.median(d)) for dtype, d in drift.items()}
    for dtype, d in drift.items():
        u = UNIT[dtype]
        print(f"{name} {dtype}: |logprob - f32 weights' reference| median {median[dtype] / u:.1f} u, "
              f"worst {max(d) / u:.1f} u")
        if median[dtype] > MEDIAN_UNITS * u or max(d) > WORST_UNITS * u:
            raise Mismatch(f"{name} {dtype}: median {median[dtype]:.2e} / worst {max(d):.2e} from "
                           f"the f32 weights' scores, beyond {MEDIAN_UNITS} / {WORST_UNITS} u")
    if "f16" in median and not median["f16"] < median["bf16"]:
        raise Mismatch(f"{name}: f16 ({median['f16']:.2e}) not closer than bf16 "
                       f"({median['bf16']:.2e}) to the f32 weights' scores")
    print(f"{name}: {', '.join(dtypes)} agree with the reference on their weights")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True, help="the built photon CLI")
    parser.add_argument("--work-dir", required=True, help="scratch directory for the models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    failures = 0
    for name, (seed, config_json, dtypes) in MODELS.items():
        try:
            check_model(args.photon, args.work_dir, name, seed, config_json, dtypes)
        except Mismatch as e:
            print(f"MISMATCH {e}", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
