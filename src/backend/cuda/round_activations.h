// One-term 16-bit activations for products at bf16 precision (linear.h): x rounded to bf16, to
// nearest even, and stored in the weights' 16-bit type: bf16 itself, or f16 for f16 weights, which
// holds every bf16 value of normal f16 magnitude exactly (f16 has the wider significand). The
// CPU's reference is CpuBackend::product_input.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace photon::cuda {

// x: [count] f32; out: [count] of type `to` (bf16 or f16). Both on the device.
void round_activations(DType to, const float* x, size_t count, void* out, cudaStream_t stream);

}  // namespace photon::cuda
