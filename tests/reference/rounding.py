#!/usr/bin/python3
"""f32 -> f16 and f32 -> bf16 rounding, as independent sources do it: NumPy's float16 (astype) and
PyTorch's bfloat16 (tensor.to). Both round to nearest, ties to even, keep subnormals, and overflow
to infinity.

The table tests/data/rounding.tsv holds the vectors of `vectors()` with both results; the
GoogleTest DTypeRounding (tests/unit/test_dtype.cpp) checks src/core/dtype against it, and the
ctest reference_rounding_table checks that it is what this script writes:

    /usr/bin/python3 tests/reference/rounding.py --write tests/data/rounding.tsv
    /usr/bin/python3 tests/reference/rounding.py --check tests/data/rounding.tsv
"""

import argparse
import sys

import numpy as np
import torch

F16_MAX = 65504.0


def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def to_f16(values):
    """NumPy's rounding: (f16 bits, the f16 values widened back to f32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        half = np.asarray(values, dtype=np.float32).astype(np.float16)
    return half.view(np.uint16), half.astype(np.float32)


def to_bf16(values):
    """PyTorch's rounding: (bf16 bits, the bf16 values widened back to f32)."""
    half = torch.from_numpy(np.array(values, dtype=np.float32)).to(torch.bfloat16)
    return (half.view(torch.int16).numpy().view(np.uint16),
            half.to(torch.float32).numpy())


def f16_neighbours(f16_bits):
    """For each f16 pattern: the f32 values at the midpoint to the next f16 value up in magnitude
    (a tie) and one f32 step either side of it."""
    h = np.asarray(f16_bits, dtype=np.uint16)
    low = h.view(np.float16).astype(np.float64)
    high = (h + np.uint16(1)).view(np.float16).astype(np.float64)
    high[np.isinf(high)] = np.copysign(65536.0, high[np.isinf(high)])  # past the largest: 2^16
    mid = bits_of((low + high) / 2)  # 12 significant bits: exact in f32
    return [mid, mid - np.uint32(1), mid + np.uint32(1)]


def bf16_neighbours(bf16_bits):
    """For each bf16 pattern: the tie to the next value up in magnitude, and one f32 step either
    side of it."""
    top = np.asarray(bf16_bits, dtype=np.uint32) << np.uint32(16)
    return [top | np.uint32(0x8000), top | np.uint32(0x7FFF), top | np.uint32(0x8001)]


def vectors(seed=15, n_random=300):
    """f32 bit patterns covering what the conversions must get right, deterministic in seed."""
    rng = np.random.default_rng(seed)
    out = [np.array([
        0x00000000, 0x80000000,  # +-0
        0x7F800000, 0xFF800000,  # +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FC12345,  # NaNs
        0x7F7FFFFF, 0xFF7FFFFF,  # largest finite f32: overflow to inf in both
        0x7F7FC000, 0xFF7FC000, 0x7F7FF000, 0xFF7FF000,  # above bf16's largest finite: inf
        0x00800000, 0x80800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,  # f32 min/sub
        0x3F800000, 0xBF800000,  # +-1
    ], dtype=np.uint32)]

    f16_edges = [
        F16_MAX, 65519.0, 65519.996, 65520.0, 65536.0, 1e5, 1e38,  # largest finite, overflow
        2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -24, 2.0 ** -25,  # min normal, subnormals
        3 * 2.0 ** -25, 5 * 2.0 ** -25, 1023.5 * 2.0 ** -24, 2.0 ** -26, 1e-10,
    ]
    edges = bits_of(np.array(f16_edges, dtype=np.float32))
    out += [edges, edges - np.uint32(1), edges + np.uint32(1), edges | np.uint32(0x80000000)]

    # Ties both ways (even and odd last bits), normal and subnormal, around both formats' values.
    f16_patterns = np.concatenate([
        np.arange(0, 32, dtype=np.uint16),                      # subnormal
        np.arange(0x03E0, 0x0420, dtype=np.uint16),              # subnormal -> normal
        np.arange(0x7BE0, 0x7C00, dtype=np.uint16),              # up to the largest finite
        rng.integers(0, 0x7C00, 100, dtype=np.uint16)])          # anywhere finite
    f16_patterns = np.concatenate([f16_patterns, f16_patterns | np.uint16(0x8000)])
    out += f16_neighbours(f16_patterns)
    bf16_patterns = np.concatenate([
        np.arange(0, 32, dtype=np.uint32),                      # subnormal
        np.arange(0x0060, 0x00A0, dtype=np.uint32),              # subnormal -> normal
        np.arange(0x7F60, 0x7F80, dtype=np.uint32),              # up to the largest finite
        rng.integers(0, 0x7F80, 100, dtype=np.uint32)])          # anywhere finite
    bf16_patterns = np.concatenate([bf16_patterns, bf16_patterns | np.uint32(0x8000)])
    out += bf16_neighbours(bf16_patterns)

    # Random values across every exponent (subnormal to overflow), and random bit patterns.
    exponents = rng.integers(-152, 129, n_random)
    mantissas = rng.uniform(1.0, 2.0, n_random) * rng.choice([-1.0, 1.0], n_random)
    with np.errstate(over="ignore"):
        out.append(bits_of((mantissas * np.exp2(exponents.astype(np.float64))).astype(np.float32)))
    out.append(rng.integers(0, 2 ** 32, n_random, dtype=np.uint64).astype(np.uint32))
    return np.concatenate(out).astype(np.uint32)


HEADER = """\
# f32 -> f16 (NumPy astype) and f32 -> bf16 (PyTorch .to) rounding; written by
# tests/reference/rounding.py, checked by tests/unit/test_dtype.cpp. Hex bit patterns, one vector a
# line: f32 input, f16 result, f16 result widened to f32, bf16 result, bf16 result widened to f32.
# For a NaN input only NaN-ness is expected (the sources choose their own NaN payloads).
"""


def table(bits):
    values = f32_from_bits(bits)
    f16, f16_wide = to_f16(values)
    bf16, bf16_wide = to_bf16(values)
    lines = [HEADER]
    for row in zip(bits, f16, bits_of(f16_wide), bf16, bits_of(bf16_wide)):
        lines.append("%08x %04x %08x %04x %08x\n" % tuple(int(v) for v in row))
    return "".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="TABLE", help="write the table")
    action.add_argument("--check", metavar="TABLE", help="fail unless TABLE is up to date")
    args = parser.parse_args()
    text = table(vectors())
    if args.write:
        with open(args.write, "w") as f:
            f.write(text)
        return 0
    with open(args.check) as f:
        if f.read() != text:
            print(f"{args.check} is out of date: rewrite it with "
                  f"{sys.argv[0]} --write {args.check}", file=sys.stderr)
            return 1
    print(f"{args.check}: {text.count(chr(10)) - HEADER.count(chr(10))} vectors, up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
