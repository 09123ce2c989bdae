#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/swiglu.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// gate, up: [n]. Grid-stride loop.
__global__ void swiglu_kernel(float* gate, const float* up, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

void swiglu(float* gate, const float* up, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(gate, up, n);
  check_launch("swiglu_kernel");
}

}  // namespace photon::cuda
