#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/convert.h"
#include "backend/cuda/kv_cache.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 128;

// One block per row. k, v: [n_rows, kv_dim] f32; each segment's cache: [capacity, kv_dim] of KV.
template <class KV>
__global__ void kv_append_kernel(const float* k, const float* v, int kv_dim,
                                 const AttentionSegment* segments, int n_segments) {
  const int row = blockIdx.x;
  const int s = find_segment(segments, n_segments, row);
  if (s < 0) return;
  const AttentionSegment seg = segments[s];
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

DeviceKvCache::DeviceKvCache(int layers, int capacity, int kv_dim, DType dtype)
    : layers_(layers), capacity_(capacity), kv_dim_(kv_dim), dtype_(dtype) {
  check(dtype == DType::F32 || dtype == DType::BF16, PHOTON_ERR_UNSUPPORTED,
        "cuda::DeviceKvCache: the cache type must be f32 or bf16");
  const size_t bytes = static_cast<size_t>(layers) * capacity * kv_dim * dtype_size(dtype);
  k_ = DeviceBuffer(bytes, "KV cache keys");
  v_ = DeviceBuffer(bytes, "KV cache values");
}

void* DeviceKvCache::k_at(int layer, int position) const {
  const size_t index = (static_cast<size_t>(layer) * capacity_ + position) * kv_dim_;
  return static_cast<char*>(k_.data()) + index * dtype_size(dtype_);
}

void* DeviceKvCache::v_at(int layer, int position) const {
  const size_t index = (static_cast<size_t>(layer) * capacity_ + position) * kv_dim_;
  return static_cast<char*>(v_.data()) + index * dtype_size(dtype_);
}

void DeviceKvCache::upload(const float* k, const float* v, int host_capacity, int len,
                           Arena& scratch, cudaStream_t stream) {
  check(len >= 0 && len <= capacity_ && len <= host_capacity, PHOTON_ERR_INTERNAL,
        "cuda::DeviceKvCache::upload: " + std::to_string(len) + " positions do not fit");
  const size_t count = static_cast<size_t>(len) * kv_dim_;
  ArenaScope scope(scratch);
  float* staging = dtype_ == DType::F32 ? nullptr : scratch.take<float>(count, "KV upload");
  for (int layer = 0; layer < layers_; ++layer) {
    const size_t host_offset = static_cast<size_t>(layer) * host_capacity * kv_dim_;
    const float* sources[2] = {k + host_offset, v + host_offset};
    void* targets[2] = {k_at(layer, 0), v_at(layer, 0)};
    for (int i = 0; i < 2; ++i) {
      if (!staging) {
        copy_to_device(targets[i], sources[i], count * sizeof(float), stream);
      } else {
        // The staging buffer is reused in stream order: each copy waits for the last convert.
        copy_to_device(staging, sources[i], count * sizeof(float), stream);
        convert_from_f32(dtype_, staging, targets[i], count, stream);
      }
    }
  }
}

void DeviceKvCache::download(float* k, float* v, int host_capacity, int len, Arena& scratch,
                             cudaStream_t stream) const {
  check(len >= 0 && len <= capacity_ && len <= host_capacity, PHOTON_ERR_INTERNAL,
        "cuda::DeviceKvCache::download: " + std::to_string(len) + " positions do not fit");
  const size_t count = static_cast<size_t>(len) * kv_dim_;
  ArenaScope scope(scratch);
  float* staging = dtype_ == DType::F32 ? nullptr : scratch.take<float>(count, "KV download");
  for (int layer = 0; layer < layers_; ++layer) {
    const size_t host_offset = static_cast<size_t>(layer) * host_capacity * kv_dim_;
    float* targets[2] = {k + host_offset, v + host_offset};
    const void* sources[2] = {k_at(layer, 0), v_at(layer, 0)};
    for (int i = 0; i < 2; ++i) {
      const void* from = sources[i];
      if (staging) {
        convert_to_f32(dtype_, sources[i], staging, count, stream);
        from = staging;
      }
      copy_to_host(targets[i], from, count * sizeof(float), stream);
    }
  }
}

void kv_append_launch(const float* k, const float* v, int kv_dim, DType dtype,
                      const AttentionSegment* segments, int n_segments, int n_rows,
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
  }
  check_launch("kv_append_kernel");
}

}  // namespace photon::cuda
