// Device-side helpers shared by the kernels: warp and block reductions, storage-type loads, and
// launch sizing. Reductions combine in a fixed order, so results do not depend on timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace photon::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float to_float(float x) {
  return x;
}
__device__ inline float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ inline float to_float(__half x) {
  return __half2float(x);
}

// Stores an f32 value in a storage type, rounding to nearest even.
__device__ inline void store_as(float x, float* p) {
  *p = x;
}
__device__ inline void store_as(float x, __nv_bfloat16* p) {
  *p = __float2bfloat16_rn(x);
}
__device__ inline void store_as(float x, __half* p) {
  *p = __float2half_rn(x);
}

template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x is a multiple of 32; scratch holds 32
// values in shared memory. Every warp reduces the same partials in the same order.
template <class T>
__device__ inline T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : T(0));
}

__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

__device__ inline int block_min(int v, int* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, offset));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : INT32_MAX;
  for (int offset = 16; offset > 0; offset >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Index of the segment whose rows [row0, row0 + rows) hold `row`, or -1. Segments are sorted by
// row0 and do not overlap.
template <class Segment>
__device__ inline int find_segment(const Segment* segments, int n, int row) {
  int lo = 0, hi = n - 1, found = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (segments[mid].row0 <= row) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found >= 0 && row >= segments[found].row0 + segments[found].rows) return -1;
  return found;
}

// Blocks for a grid-stride loop over n elements, capped: each thread then takes several.
inline unsigned grid_for(size_t n, int threads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < (1u << 16) ? (blocks ? blocks : 1) : (1u << 16));
}

}  // namespace photon::cuda
