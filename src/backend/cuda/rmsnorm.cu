#include "backend/cuda/common.cuh"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. x, y: [n, d]; w: [d]. Each thread reads and writes the same elements, so
// x and y may alias.
__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const float* x, const float* w, float* y, int d, float eps) {
  __shared__ float scratch[32];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * d;
  float* yr = y + static_cast<size_t>(blockIdx.x) * d;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < d; i += kThreads) sum += xr[i] * xr[i];
  sum = block_sum(sum, scratch);
  // The scale in double as on the CPU (cpu/rmsnorm.cpp), once per row.
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(sum) / d + eps));
  for (int i = threadIdx.x; i < d; i += kThreads) yr[i] = xr[i] * scale * w[i];
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int n, int d, float eps,
             cudaStream_t stream) {
  if (n <= 0) return;
  check(d > 0, PHOTON_ERR_INTERNAL, "cuda::rmsnorm: width must be positive");
  rmsnorm_kernel<<<n, kThreads, 0, stream>>>(x, w, y, d, eps);
  check_launch("rmsnorm_kernel");
}

}  // namespace photon::cuda
