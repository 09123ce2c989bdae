// KV caches in device memory and the append of new keys/values (after RoPE) into them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "backend/cuda/attention.h"
#include "backend/cuda/buffer.h"
#include "core/dtype.h"

namespace photon::cuda {

// The KV cache of one stack for one sequence, laid out like photon::KvCache:
// [layers][capacity][kv_dim] for K and for V, in f32 or bf16, allocated once at full capacity.
class DeviceKvCache {
 public:
  DeviceKvCache() = default;
  DeviceKvCache(int layers, int capacity, int kv_dim, DType dtype);

  int layers() const { return layers_; }
  int capacity() const { return capacity_; }
  int kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  size_t bytes_reserved() const { return k_.bytes() + v_.bytes(); }
  void* k_at(int layer, int position) const;
  void* v_at(int layer, int position) const;

  // Positions [0, len) to and from the CPU engine's f32 layout [layers][host_capacity][kv_dim]
  // (photon::KvCache), for moving a session between CPU and GPU. A bf16 cache rounds on upload
  // (nearest even) and widens exactly on download. download returns when the data has arrived.
  void upload(const float* k, const float* v, int host_capacity, int len, Arena& scratch,
              cudaStream_t stream);
  void download(float* k, float* v, int host_capacity, int len, Arena& scratch,
                cudaStream_t stream) const;

 private:
  int layers_ = 0, capacity_ = 0, kv_dim_ = 0;
  DType dtype_ = DType::F32;
  DeviceBuffer k_, v_;
};

// k, v: [n_rows, kv_dim] f32 on the device. Row row0 + i of each segment is stored at position
// start + i of that segment's cache (seg.k / seg.v point at position 0 of one layer, in `dtype`).
void kv_append_launch(const float* k, const float* v, int kv_dim, DType dtype,
                      const AttentionSegment* segments, int n_segments, int n_rows,
                      cudaStream_t stream);

}  // namespace photon::cuda
