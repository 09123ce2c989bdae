// SwiGLU gate on the device: gate = silu(gate) * up, elementwise (spec section 2).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace photon::cuda {

// gate, up: [n] f32 on the device; gate is overwritten with the product.
void swiglu(float* gate, const float* up, size_t n, cudaStream_t stream);

}  // namespace photon::cuda
