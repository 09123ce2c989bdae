#include "backend/cuda/common.cuh"
#include "backend/cuda/round_activations.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// x: [count] f32 -> out: [count] of T, each bf16(x). Grid-stride loop.
template <class T>
__global__ void round_kernel(const float* x, size_t count, T* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < count; i += stride)
    store_as(__bfloat162float(__float2bfloat16_rn(x[i])), out + i);
}

template <class T>
void round_launch(const float* x, size_t count, void* out, cudaStream_t stream) {
  round_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(x, count, static_cast<T*>(out));
  check_launch("round_kernel");
}

}  // namespace

void round_activations(DType to, const float* x, size_t count, void* out, cudaStream_t stream) {
  if (count == 0) return;
  switch (to) {
    case DType::BF16: return round_launch<__nv_bfloat16>(x, count, out, stream);
    case DType::F16: return round_launch<__half>(x, count, out, stream);
    case DType::F32: break;
    case DType::Q8: q8_unsupported("round_activations");
  }
  fail(PHOTON_ERR_INTERNAL, "cuda::round_activations: f32 weights take f32 activations");
}

}  // namespace photon::cuda
