// Two-term 16-bit activations for products with 16-bit weights (linear.h): x = hi + lo, each
// rounded to the weights' type, so one tensor-core GEMM over the stacked rows [hi; lo] carries
// the activations to about 2^-17 of their value (bf16) instead of 2^-9, and the CPU engine's
// f32 activations are matched; the two halves of the product are then summed in f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace photon::cuda {

// x: [count] f32; hi, lo: [count] of type `to` (bf16 or f16). All on the device.
void split_activations(DType to, const float* x, size_t count, void* hi, void* lo,
                       cudaStream_t stream);

// parts: [2n, out] f32, the products of hi (rows 0..n-1) and lo (rows n..2n-1); bias: [out] f32
// or null. y[n, out] = (accumulate ? y : 0) + parts[hi] + parts[lo] + bias.
void sum_halves(const float* parts, int n, int out, const float* bias, bool accumulate, float* y,
                cudaStream_t stream);

}  // namespace photon::cuda
