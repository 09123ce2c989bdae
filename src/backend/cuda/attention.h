// Causal grouped-query attention on the device (spec section 2), over segments as in
// cpu::attention: one kernel serves
//   (a) prefill of a level's stream: one long segment, row i attending to keys 0 .. start + i;
//   (b) decode: one query row per sequence against its KV cache; long caches are split over
//       several blocks (flash-decoding) and the partial softmaxes combined;
//   (c) the local windows: many segments of at most R + C - 1 keys, all in one launch.
// One warp computes one (query row, query head) with an online softmax over 32-key tiles. Query
// heads sharing a KV head run in the same block, so their K/V reads hit the same cache lines.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "backend/cuda/buffer.h"
#include "core/dtype.h"

namespace photon::cuda {

// Query rows [row0, row0 + rows) sit at positions start .. start + rows - 1 of one sequence whose
// cache k, v holds [start + rows, kv_heads * head_dim] values of the cache's dtype (f32, bf16,
// f16), position 0 first (one layer of a DeviceKvCache). Row i attends to keys 0 .. start + i.
// Segments passed to a launch cover ascending, non-overlapping row ranges.
struct AttentionSegment {
  int row0 = 0;
  int rows = 0;
  int start = 0;
  void* k = nullptr;  // device memory; written by kv_append, read by attention
  void* v = nullptr;
};

struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // even, at most kMaxAttentionHeadDim
  DType kv_dtype = DType::F32;
};

constexpr int kMaxAttentionHeadDim = 256;

// Blocks per query head over which a row's keys are split: 1 unless the launch is too small to
// fill the device and the longest row has many keys.
int attention_splits(int n_rows, int heads, int max_keys, int multiprocessors);
// Device scratch for the partial results of `splits` > 1.
size_t attention_partials_bytes(int n_rows, int heads, int head_dim, int splits);

// q: [n_rows, heads * head_dim] f32; out: [n_rows, heads * head_dim] f32 (heads concatenated);
// segments: [n_segments] device descriptors; partials: attention_partials_bytes of device
// scratch (null when splits == 1). Rows outside every segment are left untouched. Everything is
// on the device, so a decode step recorded into a CUDA graph replays with fresh cache lengths
// once the caller rewrites the descriptors.
void attention_launch(const float* q, const AttentionShape& shape, const AttentionSegment* segments,
                      int n_segments, int n_rows, int splits, float* partials, float* out,
                      cudaStream_t stream);

// ---- tiled (flash-style) kernel for long segments: prefill ----
// A block takes a tile of kAttentionTileRows query rows of one segment for one query head, and
// walks the keys in tiles of 32 that it loads into shared memory once for all its rows, with an
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
void attention_tiled_launch(const float* q, const AttentionShape& shape,
                            const AttentionSegment* segments, const AttentionTile* tiles,
                            int n_tiles, float* out, cudaStream_t stream);

// Convenience for host descriptors: stages them and the partials in `scratch` (returned before
// this returns), chooses the splits unless `splits` > 0, and launches.
void attention(const float* q, const AttentionShape& shape,
               std::span<const AttentionSegment> segments, float* out, Arena& scratch,
               cudaStream_t stream, int splits = 0);

}  // namespace photon::cuda
