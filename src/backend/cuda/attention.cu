#include <algorithm>

#include "backend/cuda/attention.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kWarps = 4;  // query heads per block
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 32;  // keys per step: one per lane
constexpr int kMinKeysPerSplit = 128;

// grid (n_rows, ceil(heads / kWarps), splits); one warp per (query row, query head), keys
// [begin, end) of its split. q, out: [n_rows, heads, head_dim]; each segment's k, v:
// [keys, kv_heads, head_dim]; partials: [n_rows, heads, splits, 2 + head_dim] holding
// (max, sum of exp, unnormalised output) when splits > 1.
// Scores: lanes over keys. Output: lanes over dimensions (kDimsPerLane each), the tile's softmax
// weights broadcast by shuffles.
template <class KV, int kDimsPerLane>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* q, int heads, int kv_heads, int head_dim,
                     const DeviceSegment* segments, int n_segments, float* partials, float* out) {
  __shared__ float q_shared[kWarps][kMaxAttentionHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x, head = blockIdx.y * kWarps + warp;
  const int split = blockIdx.z, splits = gridDim.z;
  const int s = find_segment(segments, n_segments, row);
  if (s < 0 || head >= heads) return;  // whole warps leave; only warp-level syncs follow
  const DeviceSegment seg = segments[s];
  const int keys = seg.start + (row - seg.row0) + 1;
  const int per_split = (keys + splits - 1) / splits;
  const int begin = split * per_split, end = min(keys, begin + per_split);
  const int kv_dim = kv_heads * head_dim;
  const size_t kv_offset = static_cast<size_t>(head / (heads / kv_heads)) * head_dim;
  const KV* k = static_cast<const KV*>(seg.k) + kv_offset;
  const KV* v = static_cast<const KV*>(seg.v) + kv_offset;
  const size_t item = static_cast<size_t>(row) * heads + head;

  float* qs = q_shared[warp];
  for (int d = lane; d < head_dim; d += 32) qs[d] = q[item * head_dim + d];
  __syncwarp();
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));  // as cpu::attention
  float running_max = -INFINITY, sum = 0.0f, acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;

  for (int tile = begin; tile < end; tile += kTile) {
    const int key = tile + lane;
    float score = -INFINITY;
    if (key < end) {
      const KV* kr = k + static_cast<size_t>(key) * kv_dim;
      float dot = 0.0f;
#pragma unroll 4
      for (int d = 0; d < head_dim; ++d) dot += qs[d] * to_float(kr[d]);
      score = dot * scale;
    }
    const float new_max = fmaxf(running_max, warp_max(score));  // finite: lane 0 has a key
    const float p = key < end ? expf(score - new_max) : 0.0f;
    const float rescale = expf(running_max - new_max);  // 0 on the first tile
    sum = sum * rescale + warp_sum(p);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= rescale;
    const int count = min(kTile, end - tile);
    for (int j = 0; j < count; ++j) {
      const float weight = __shfl_sync(kFullMask, p, j);
      const KV* vr = v + static_cast<size_t>(tile + j) * kv_dim;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < head_dim) acc[i] += weight * to_float(vr[d]);
      }
    }
    running_max = new_max;
  }

  if (splits == 1) {
    float* o = out + item * head_dim;
    const float inv = 1.0f / sum;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) o[d] = acc[i] * inv;
    }
  } else {
    // An empty split (begin >= end) records max -inf and sum 0, which the combine weighs by 0.
    float* part = partials + (item * splits + split) * (2 + head_dim);
    if (lane == 0) {
      part[0] = running_max;
      part[1] = sum;
    }
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) part[2 + d] = acc[i];
    }
  }
}

// grid (n_rows, heads), one warp each: merges the splits' partial softmaxes.
// partials: [n_rows, heads, splits, 2 + head_dim]; out: [n_rows, heads, head_dim].
__global__ void attention_combine_kernel(const float* partials, int heads, int head_dim, int splits,
                                         const DeviceSegment* segments, int n_segments,
                                         float* out) {
  const int row = blockIdx.x;
  if (find_segment(segments, n_segments, row) < 0) return;
  const size_t item = static_cast<size_t>(row) * heads + blockIdx.y;
  const int stride = 2 + head_dim;
  const float* part = partials + item * splits * stride;
  float max = -INFINITY;
  for (int s = 0; s < splits; ++s) max = fmaxf(max, part[s * stride]);
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += part[s * stride + 1] * expf(part[s * stride] - max);
  const float inv = 1.0f / sum;
  float* o = out + item * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += 32) {
    float value = 0.0f;
    for (int s = 0; s < splits; ++s)
      value += part[s * stride + 2 + d] * expf(part[s * stride] - max);
    o[d] = value * inv;
  }
}

template <class KV>
void launch_typed(dim3 grid, const float* q, const AttentionShape& shape,
                  const DeviceSegment* segments, int n_segments, float* partials, float* out,
                  cudaStream_t stream) {
  const int h = shape.heads, hk = shape.kv_heads, d = shape.head_dim;
  if (d <= 64)
    attention_kernel<KV, 2>
        <<<grid, kThreads, 0, stream>>>(q, h, hk, d, segments, n_segments, partials, out);
  else if (d <= 128)
    attention_kernel<KV, 4>
        <<<grid, kThreads, 0, stream>>>(q, h, hk, d, segments, n_segments, partials, out);
  else
    attention_kernel<KV, 8>
        <<<grid, kThreads, 0, stream>>>(q, h, hk, d, segments, n_segments, partials, out);
  check_launch("attention_kernel");
}

// Within the op contract (backend.h), the kernels' own limit.
void validate(const AttentionShape& shape) {
  check(shape.head_dim <= kMaxAttentionHeadDim, PHOTON_ERR_UNSUPPORTED,
        "CUDA attention: " + std::to_string(shape.head_dim) +
            " values per head are more than the kernels take (" +
            std::to_string(kMaxAttentionHeadDim) + ")");
}

}  // namespace

int attention_splits(int n_rows, int heads, int max_keys, int multiprocessors) {
  const long blocks = static_cast<long>(n_rows) * ((heads + kWarps - 1) / kWarps);
  const long wanted = 4L * multiprocessors;  // blocks that keep every multiprocessor busy
  if (max_keys < 2 * kMinKeysPerSplit || blocks >= wanted) return 1;
  const long by_keys = max_keys / kMinKeysPerSplit;
  const long by_fill = (wanted + blocks - 1) / blocks;
  return static_cast<int>(std::clamp(std::min(by_keys, by_fill), 1L, 64L));
}

size_t attention_partials_bytes(int n_rows, int heads, int head_dim, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(n_rows) * heads * splits * (2 + head_dim) * sizeof(float);
}

void attention_launch(const float* q, const AttentionShape& shape, DType kv_dtype,
                      const DeviceSegment* segments, int n_segments, int n_rows, int splits,
                      float* partials, float* out, cudaStream_t stream) {
  if (n_rows <= 0 || n_segments <= 0) return;
  validate(shape);
  check(splits >= 1 && splits <= 65535 && (splits == 1 || partials), PHOTON_ERR_INTERNAL,
        "cuda::attention_launch: bad split count or missing partials");
  const dim3 grid(n_rows, (shape.heads + kWarps - 1) / kWarps, splits);
  switch (kv_dtype) {
    case DType::F32:
      launch_typed<float>(grid, q, shape, segments, n_segments, partials, out, stream);
      break;
    case DType::BF16:
      launch_typed<__nv_bfloat16>(grid, q, shape, segments, n_segments, partials, out, stream);
      break;
    case DType::F16:
      launch_typed<__half>(grid, q, shape, segments, n_segments, partials, out, stream);
      break;
    case DType::Q8: q8_unsupported("attention_kernel");
  }
  if (splits > 1) {
    attention_combine_kernel<<<dim3(n_rows, shape.heads), 32, 0, stream>>>(
        partials, shape.heads, shape.head_dim, splits, segments, n_segments, out);
    check_launch("attention_combine_kernel");
  }
}

}  // namespace photon::cuda
