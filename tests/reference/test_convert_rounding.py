#!/usr/bin/python3
"""`photon convert --dtype f16|bf16` end to end: the stored tensors must be NumPy's float16 and
PyTorch's bfloat16 rounding of the npz's float32 weights, bit for bit, for the vectors of
rounding.py that fit a model file (ties both ways, subnormals, the largest finite values, signed
zero, values across every exponent) and more random ones. A float16 npz holding every finite f16
bit pattern must convert to f32 as NumPy widens it, to f16 unchanged, and to bf16 as PyTorch rounds
the widened values. Model files hold finite weights only: a NaN or an infinity in the npz, or a
finite value whose rounding overflows the storage type, must be refused with a message naming the
tensor and the element.

    /usr/bin/python3 tests/reference/test_convert_rounding.py --photon build/bin/photon \
        --work-dir /tmp/w
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from rounding import f32_from_bits, to_bf16, to_f16, vectors

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from photon_ref.model import Config, build_model  # noqa: E402

# About 180k weights: room for every f16 bit pattern.
CONFIG = {"arch": "vanilla", "vocab_size": 320, "dim": 128, "layers": 1, "heads": 2, "kv_heads": 1,
          "head_dim": 64, "ffn_dim": 128, "max_seq_len": 64}


def run(args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} exited with {result.returncode}:\n"
                         f"{result.stderr}")
    return result.stdout


def tensor_shapes():
    model = build_model(Config.from_json(CONFIG))
    return {name: tuple(t.shape) for name, t in sorted(model.state_dict().items())}


def write_npz(path, values, shapes):
    """Spreads `values` over the config's tensors in name order; returns {name: array}."""
    arrays, start = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        arrays[name] = values[start:start + n].reshape(shape)
        start += n
    assert start == len(values)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return arrays


def stored_bits(photon, path, name_dtype):
    """{tensor name: its stored values as unsigned integers} of a model file."""
    info = json.loads(run([photon, "inspect", path, "--json"]))
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for t in info["file"]["tensors"]:
        if t["dtype"] != name_dtype:
            raise SystemExit(f"{path}: {t['name']} is stored as {t['dtype']}, not {name_dtype}")
        kind = np.uint32 if name_dtype == "f32" else np.uint16
        out[t["name"]] = np.frombuffer(data[t["offset"]:t["offset"] + t["bytes"]], dtype=kind)
    return out


NAN_FIELDS = {"f32": (0x7F800000, 0x007FFFFF), "f16": (0x7C00, 0x03FF), "bf16": (0x7F80, 0x007F)}


def compare(what, dtype, got, want, nan_input):
    """Number of mismatches (NaN inputs must give some NaN), the first few printed."""
    if got.shape != want.shape:
        print(f"{what}: {got.size} values stored, {want.size} expected")
        return max(got.size, want.size)
    exponent, mantissa = NAN_FIELDS[dtype]
    got_nan = ((got & exponent) == exponent) & ((got & mantissa) != 0)
    wrong = np.where(nan_input, ~got_nan, got != want)
    width = 2 * got.itemsize
    for i in np.nonzero(wrong)[0][:10]:
        print(f"{what}: value {i}: got {int(got[i]):0{width}x}, want {int(want[i]):0{width}x}")
    return int(wrong.sum())


def convert_args(photon, work_dir, config, weights, dtype):
    out = os.path.join(work_dir, f"{os.path.basename(weights)}.{dtype}.photon")
    return out, [photon, "convert", "--config", config, "--weights", weights, "--dtype", dtype,
                 "--tokenizer", os.path.join(ROOT, "tests", "data", "tiny.model"), "-o", out]


def convert(photon, work_dir, config, weights, dtype):
    out, args = convert_args(photon, work_dir, config, weights, dtype)
    run(args)
    return out


def f16_finite(bits):
    return (bits & np.uint16(0x7C00)) != np.uint16(0x7C00)


def refusals(photon, work_dir, config, shapes, total):
    """Number of wrong answers to weights a model file cannot hold."""
    failures = 0
    base = np.full(total, 0.5, dtype=np.float32)
    name = list(shapes)[1]
    first = int(np.prod(shapes[list(shapes)[0]]))
    cases = [("nan", np.float32("nan"), ("f32", "f16", "bf16"), "holds nan"),
             ("inf", np.float32("-inf"), ("f32", "f16", "bf16"), "holds -inf"),
             ("f16-overflow", np.float32(1e5), ("f16",), "")]
    for label, value, dtypes, text in cases:
        values = base.copy()
        values[first + 3] = value
        npz = os.path.join(work_dir, f"{label}.npz")
        write_npz(npz, values, shapes)
        for dtype in ("f32", "f16", "bf16"):
            _, args = convert_args(photon, work_dir, config, npz, dtype)
            result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
            refused = result.returncode != 0
            if refused != (dtype in dtypes):
                print(f"{label} -> {dtype}: {'refused' if refused else 'accepted'}:\n"
                      f"{result.stderr}")
                failures += 1
            elif refused and (f"'{name}'" not in result.stderr or text not in result.stderr or
                              "PHOTON_ERR_NOT_FINITE" not in result.stderr):
                print(f"{label} -> {dtype}: the message does not name '{name}' and {text!r}:\n"
                      f"{result.stderr}")
                failures += 1
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True, help="the built photon CLI")
    parser.add_argument("--work-dir", required=True, help="scratch directory")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    config = os.path.join(args.work_dir, "config.json")
    with open(config, "w") as f:
        json.dump(CONFIG, f)
    shapes = tensor_shapes()
    total = sum(int(np.prod(s)) for s in shapes.values())
    failures = 0

    # float32 weights: the rounding vectors that stay finite in f16 (and so in bf16), then more of
    # their kind with other random values.
    bits = np.concatenate([vectors(), vectors(seed=8, n_random=total)])
    bits = bits[f16_finite(to_f16(f32_from_bits(bits))[0])][:total]
    assert len(bits) == total
    f32_npz = os.path.join(args.work_dir, "f32.npz")
    arrays = write_npz(f32_npz, f32_from_bits(bits), shapes)
    for dtype, expected in (("f16", to_f16), ("bf16", to_bf16)):
        stored = stored_bits(args.photon, convert(args.photon, args.work_dir, config, f32_npz,
                                                  dtype), dtype)
        for name, array in arrays.items():
            failures += compare(f"{name} f32 -> {dtype}", dtype,
                                stored.get(name, np.zeros(0, np.uint16)),
                                expected(array.ravel())[0], np.isnan(array.ravel()))

    # float16 weights: every finite bit pattern, then random finite ones.
    rng = np.random.default_rng(7)
    half = np.concatenate([np.arange(2 ** 16, dtype=np.uint16),
                           rng.integers(0, 2 ** 16, total, dtype=np.uint16)])
    half = half[f16_finite(half)][:total]
    f16_npz = os.path.join(args.work_dir, "f16.npz")
    arrays = write_npz(f16_npz, half.view(np.float16), shapes)
    for dtype in ("f32", "f16", "bf16"):
        stored = stored_bits(args.photon, convert(args.photon, args.work_dir, config, f16_npz,
                                                  dtype), dtype)
        for name, array in arrays.items():
            widened = array.ravel().astype(np.float32)
            want = {"f32": widened.view(np.uint32), "f16": array.ravel().view(np.uint16),
                    "bf16": to_bf16(widened)[0]}[dtype]
            failures += compare(f"{name} f16 -> {dtype}", dtype,
                                stored.get(name, np.zeros(0, want.dtype)), want, np.isnan(widened))

    failures += refusals(args.photon, args.work_dir, config, shapes, total)
    print(f"{2 * total} f32 and {3 * total} f16 weights converted, non-finite weights refused; "
          f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
