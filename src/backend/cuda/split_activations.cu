#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/split_activations.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// x: [count] f32 -> hi, lo: [count] of T. Grid-stride loop.
template <class T>
__global__ void split_kernel(const float* x, size_t count, T* hi, T* lo) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    const float v = x[i];
    T rounded;
    store_as(v, &rounded);
    hi[i] = rounded;
    store_as(v - to_float(rounded), lo + i);
  }
}

// parts: [2n, out]; y: [n, out]. Grid-stride loop over y.
__global__ void sum_halves_kernel(const float* parts, int n, int out, const float* bias,
                                  bool accumulate, float* y) {
  const size_t count = static_cast<size_t>(n) * out;
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    float v = parts[i] + parts[count + i];
    if (bias != nullptr) v += bias[i % out];
    y[i] = accumulate ? y[i] + v : v;
  }
}

template <class T>
void split_launch(const float* x, size_t count, void* hi, void* lo, cudaStream_t stream) {
  split_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(x, count, static_cast<T*>(hi),
                                                                   static_cast<T*>(lo));
  check_launch("split_kernel");
}

}  // namespace

void split_activations(DType to, const float* x, size_t count, void* hi, void* lo,
                       cudaStream_t stream) {
  if (count == 0) return;
  switch (to) {
    case DType::BF16: return split_launch<__nv_bfloat16>(x, count, hi, lo, stream);
    case DType::F16: return split_launch<__half>(x, count, hi, lo, stream);
    case DType::F32: break;
    case DType::Q8: q8_unsupported("split_activations");
  }
  fail(PHOTON_ERR_INTERNAL, "cuda::split_activations: f32 has no 16-bit halves");
}

void sum_halves(const float* parts, int n, int out, const float* bias, bool accumulate, float* y,
                cudaStream_t stream) {
  const size_t count = static_cast<size_t>(n) * out;
  if (count == 0) return;
  sum_halves_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(parts, n, out, bias,
                                                                        accumulate, y);
  check_launch("sum_halves_kernel");
}

}  // namespace photon::cuda
