// Causal grouped-query attention on the device (spec section 2), over segments
// (backend/descriptors.h): one kernel serves
//   (a) prefill of a level's stream: one long segment, row i attending to keys 0 .. start + i;
//   (b) decode: one query row per sequence against its KV cache; long caches are split over
//       several blocks (flash-decoding) and the partial softmaxes combined;
//   (c) the local windows: many segments of at most R + C - 1 keys, all in one launch.
// One warp computes one (query row, query head) with an online softmax over 32-key tiles. Query
// heads sharing a KV head run in the same block, so their K/V reads hit the same cache lines.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/descriptors.h"
#include "core/dtype.h"

namespace photon::cuda {

// A segment as the kernels read it from device memory: its caches' device addresses (position 0
// of one layer), all of one launch's kv dtype. A launch's segments cover ascending, disjoint row
// ranges.
using DeviceSegment = BasicAttentionSegment<void*>;

// The most values per head the kernels take (PHOTON_ERR_UNSUPPORTED beyond).
constexpr int kMaxAttentionHeadDim = 256;

// Blocks per query head over which a row's keys are split: 1 unless the launch is too small to
// fill the device and the longest row has many keys.
int attention_splits(int n_rows, int heads, int max_keys, int multiprocessors);
// Device scratch for the partial results of `splits` > 1.
size_t attention_partials_bytes(int n_rows, int heads, int head_dim, int splits);

// q: [n_rows, heads * head_dim] f32; out: [n_rows, heads * head_dim] f32 (heads concatenated);
// segments: [n_segments] device descriptors whose caches hold kv_dtype; partials:
// attention_partials_bytes of device scratch (null when splits == 1). Rows outside every segment
// are left untouched.
void attention_launch(const float* q, const AttentionShape& shape, DType kv_dtype,
                      const DeviceSegment* segments, int n_segments, int n_rows, int splits,
                      float* partials, float* out, cudaStream_t stream);

// ---- tiled (flash-style) kernel for long segments: prefill ----
// A block takes a tile of kAttentionTileRows query rows of one segment for one query head, and
// walks the keys in tiles of 64 that it loads into shared memory once for all its rows, with an
// online softmax per row: each cached key is read once per tile of rows instead of once per row.
// f32 arithmetic throughout, like the row kernel. Needs head_dim % 4 == 0 and head_dim <=
// kMaxTiledHeadDim (attention_tiled_supports).
constexpr int kAttentionTileRows = 32;
constexpr int kMaxTiledHeadDim = 128;

// Rows [first, first + kAttentionTileRows) of segments[segment] (fewer at the segment's end).
struct AttentionTile {
  int segment = 0;
  int first = 0;
};

bool attention_tiled_supports(const AttentionShape& shape);

// q, out as attention_launch; segments and tiles: device descriptors. Rows of segments that no
// tile covers are left untouched.
void attention_tiled_launch(const float* q, const AttentionShape& shape, DType kv_dtype,
                            const DeviceSegment* segments, const AttentionTile* tiles, int n_tiles,
                            float* out, cudaStream_t stream);

}  // namespace photon::cuda
