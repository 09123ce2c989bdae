#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_append.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 128;

// One block per row. k, v: [n_rows, kv_dim] f32; each segment's cache: [capacity, kv_dim] of KV.
template <class KV>
__global__ void kv_append_kernel(const float* k, const float* v, int kv_dim,
                                 const DeviceSegment* segments, int n_segments) {
  const int row = blockIdx.x;
  const int s = find_segment(segments, n_segments, row);
  if (s < 0) return;
  const DeviceSegment seg = segments[s];
  const size_t position = static_cast<size_t>(seg.start) + (row - seg.row0);
  KV* kc = static_cast<KV*>(seg.k) + position * kv_dim;
  KV* vc = static_cast<KV*>(seg.v) + position * kv_dim;
  const float* kr = k + static_cast<size_t>(row) * kv_dim;
  const float* vr = v + static_cast<size_t>(row) * kv_dim;
  for (int i = threadIdx.x; i < kv_dim; i += kThreads) {
    store_as(kr[i], kc + i);
    store_as(vr[i], vc + i);
  }
}

}  // namespace

void kv_append_launch(const float* k, const float* v, int kv_dim, DType dtype,
                      const DeviceSegment* segments, int n_segments, int n_rows,
                      cudaStream_t stream) {
  if (n_rows <= 0 || n_segments <= 0 || kv_dim <= 0) return;
  switch (dtype) {
    case DType::F32:
      kv_append_kernel<float><<<n_rows, kThreads, 0, stream>>>(k, v, kv_dim, segments, n_segments);
      break;
    case DType::BF16:
      kv_append_kernel<__nv_bfloat16>
          <<<n_rows, kThreads, 0, stream>>>(k, v, kv_dim, segments, n_segments);
      break;
    case DType::F16:
      kv_append_kernel<__half><<<n_rows, kThreads, 0, stream>>>(k, v, kv_dim, segments, n_segments);
      break;
    case DType::Q8: q8_unsupported("kv_append_kernel");
  }
  check_launch("kv_append_kernel");
}

}  // namespace photon::cuda
