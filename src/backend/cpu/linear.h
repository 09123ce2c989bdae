// y[n, out] (+)= x[n, in] . W[out, in]^T (+ bias) -- a linear layer over rows (spec section 2),
// with W read in its stored type (f32, bf16, f16 or q8) and f32 arithmetic; or, at int8 precision,
// q8 weights with the activations quantized too (quantize_int8.h) and integer dot products.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/skinny_gemm.h"
#include "backend/descriptors.h"

namespace photon::cpu {

// A product's activations as the kernels take them: f32 rows; where q is set, the same rows
// quantized (quantize_int8.h), which products with q8 weights then take instead; where xb is set
// (bf16 precision), the rows, already rounded to bf16, packed as bf16, which products with bf16
// weights then take (the bf16_dot kernel).
struct ProductInput {
  const float* x = nullptr;   // [n, in]
  const int8_t* q = nullptr;  // [n, in]
  const float* d = nullptr;   // [n, in / 32]
  const Bf16* xb = nullptr;   // [n, in]
};

// Every row count runs the skinny kernels (skinny_gemm.h) of the given set, so that a row's
// result depends on its own activations and the weights only: not on the rows beside it (a
// batch, a prompt however it is sliced, RecGen's sibling windows), the threads or the work items.
// The outputs are split over at most `threads` threads. accumulate: y += x W^T instead of
// y = x W^T. bias (may be null) is then added to every row.
void linear(const ProductInput& x, int n, const WeightMatrix& w, const float* bias, float* y,
            bool accumulate, const SkinnyKernels& kernels, int threads);

// linear() of one input with several weight matrices of its width, without biases (attention's Q,
// K and V; the FFN's gate and up): each result the same bits as its own linear() call, the work
// items of all of them in one parallel region.
void linear_group(const ProductInput& x, int n, std::span<const Product> products,
                  const SkinnyKernels& kernels, int threads);

}  // namespace photon::cpu
