// RMSNorm over rows on the device: y = x / sqrt(mean(x^2) + eps) * w   (spec section 2).
#pragma once

#include <cuda_runtime_api.h>

namespace photon::cuda {

// x, y: [n, d] f32 on the device (may alias); w: [d] f32.
void rmsnorm(const float* x, const float* w, float* y, int n, int d, float eps,
             cudaStream_t stream);

}  // namespace photon::cuda
