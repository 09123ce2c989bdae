#include "backend/cuda/common.cuh"
#include "backend/cuda/convert.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// src: [n] of From; dst: [n] of To. Grid-stride loop.
template <class From, class To>
__global__ void convert_kernel(const From* src, To* dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    store_as(to_float(src[i]), dst + i);
}

template <class From, class To>
void launch(const void* src, void* dst, size_t n, cudaStream_t stream) {
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const From*>(src),
                                                                 static_cast<To*>(dst), n);
  check_launch("convert_kernel");
}

}  // namespace

void convert_from_f32(DType to, const float* src, void* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (to) {
    case DType::F32:
      PHOTON_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::BF16: return launch<float, __nv_bfloat16>(src, dst, n, stream);
    case DType::F16: return launch<float, __half>(src, dst, n, stream);
    case DType::Q8: q8_unsupported("convert_from_f32");
  }
}

void convert_to_f32(DType from, const void* src, float* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (from) {
    case DType::F32:
      PHOTON_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::BF16: return launch<__nv_bfloat16, float>(src, dst, n, stream);
    case DType::F16: return launch<__half, float>(src, dst, n, stream);
    case DType::Q8: q8_unsupported("convert_to_f32");
  }
}

}  // namespace photon::cuda
