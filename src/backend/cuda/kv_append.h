// The append of new keys (after RoPE) and values into KV caches in device memory.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "core/dtype.h"

namespace photon::cuda {

// k, v: [n_rows, kv_dim] f32 on the device. Row row0 + i of each segment is stored at position
// start + i of that segment's caches (seg.k / seg.v point at position 0 of one layer, in `dtype`,
// rounded to nearest even into a 16-bit cache).
void kv_append_launch(const float* k, const float* v, int kv_dim, DType dtype,
                      const DeviceSegment* segments, int n_segments, int n_rows,
                      cudaStream_t stream);

}  // namespace photon::cuda
