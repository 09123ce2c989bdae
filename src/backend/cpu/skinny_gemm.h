// Products of activation rows with a weight matrix read in its stored type: y[r, o] = sum_k
// x[r, k] w[o, k], for every row count (one row per session decoding, a prompt's rows, RecGen's
// sibling windows). Each tile of weight rows is read once for several activation rows and widened
// in registers, so a bf16 model is never copied to f32; with many rows, cache-blocked loops keep
// the tiles' operands near the core (skinny_gemm_tiles.h).
//
// The order of the arithmetic is fixed, so that a result does not depend on the number of rows,
// the range of outputs a thread computes, or the loops and the tile that computed it: for each
// (r, o), 16 partial sums s[l] += x[r, k] w[o, k] over k = 16 i + l for every whole group of 16
// columns (ascending), then the tree ((s[l] + s[l + 8]), then + 4, + 2, + 1) down to one sum,
// then the remaining columns one at a time. The vector kernels fuse each multiply-add; the
// portable one need not, so the two agree to within f32 rounding. A q8 weight enters as d * q,
// exact in f32, so q8 products are f32 products with the dequantized matrix (rows of q8 have a
// multiple of 32 columns, so no column is left over).
//
// The q8_int8 kernel (int8 precision) takes the activations quantized as well, per block of 32
// columns (quantize_int8.h): an integer dot product per block, scaled in f32. Its order: for each
// (r, o), eight lane sums a[m] over the blocks b in ascending order, a[m] = fma(t, xd[r, b] *
// wd[o, b], a[m]) with t the exact integer sum of xq[r, k] wq[o, k] over k = 32 b + 4 m .. + 3,
// then (a[m] + a[m + 4]), + 2, + 1. Every vector set, and the portable kernel, gives the same
// bits.
//
// This header is included by the kernel files compiled for wider instruction sets: it must not
// bring in inline code with external linkage (see skinny_gemm_avx2.cpp).
#pragma once

#include <cstdint>

#include "backend/cpu/attention_rows.h"

namespace photon::cpu {

// Storage types of weight elements, distinct so that the kernels overload on them.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
// A block of 32 values of a q8 row (core/dtype.h): bf16 scale bits, then the int8 values.
struct Q8Block {
  uint16_t scale;
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 34, "a q8 block is 34 bytes, as in the file");

struct SkinnyArgs {
  const float* x = nullptr;  // [n, in]
  int n = 0;
  int in = 0;
  const void* w = nullptr;  // [out, in] of the kernel's storage type
  int o0 = 0, o1 = 0;       // the outputs to compute
  float* y = nullptr;       // row r at y + r * ldy
  int ldy = 0;
  bool accumulate = false;  // y += product instead of y = product
  // The q8_int8 kernel's activations, in place of x: x quantized per block of 32 columns.
  const int8_t* xq = nullptr;  // [n, in]
  const float* xd = nullptr;   // [n, in / 32]: the blocks' scales
  // The bf16_dot kernel's activations, besides x: x (already rounded to bf16) packed as bf16.
  const Bf16* xb = nullptr;  // [n, in]
};

using SkinnyKernel = void (*)(const SkinnyArgs&);

// The kernels of one instruction set: the skinny products per weight type (q8_int8: q8 weights and
// int8 activations; bf16_dot: bf16 weights and activations rounded to bf16, the bf16 kernel where
// the set has no bf16 dot product), and attention's loops over f32, bf16 and f16 KV caches
// (attention_rows.h).
struct SkinnyKernels {
  SkinnyKernel f32, bf16, f16, q8, q8_int8, bf16_dot;
  AttentionLoops attention_f32, attention_bf16, attention_f16;
};

// Plain C++ (any CPU).
extern const SkinnyKernels kSkinnyPortable;
// AVX2 + FMA + F16C; only on x86-64 builds (PHOTON_X86_KERNELS), only where cpu_has_avx2() says.
extern const SkinnyKernels kSkinnyAvx2;
// AVX-512F, likewise, where cpu_has_avx512() says; the same bits as kSkinnyAvx2.
extern const SkinnyKernels kSkinnyAvx512;
// The q8_int8 kernel with AVX512-VNNI, which kSkinnyAvx512 runs where cpu_has_avx512_vnni() says
// (its AVX2 kernel elsewhere); the same bits.
void skinny_q8_int8_avx512vnni(const SkinnyArgs& a);
// The bf16_dot kernel with AVX512-BF16 (vdpbf16ps), which kSkinnyAvx512 runs where
// cpu_has_fast_bf16_dot() says and `in` is even (its bf16 kernel elsewhere): its own order of the
// arithmetic, within f32 rounding of the others (skinny_bf16_avx512bf16.cpp).
void skinny_bf16_dot_avx512bf16(const SkinnyArgs& a);

}  // namespace photon::cpu
