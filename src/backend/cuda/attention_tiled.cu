#include "backend/cuda/attention.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kAttentionTileRows / kWarps;
constexpr int kTileKeys = 32;  // one key per lane
// Floats after each Q and K row in shared memory: rows stay 16-byte aligned, and the lanes of a
// quarter-warp reading the same column of 8 different K rows fall in different banks.
constexpr int kPad = 4;
constexpr size_t kDefaultSharedLimit = 48 << 10;

size_t shared_bytes(int head_dim) {
  const size_t padded = static_cast<size_t>(kAttentionTileRows + kTileKeys) * (head_dim + kPad);
  return sizeof(float) * (padded + static_cast<size_t>(kTileKeys) * head_dim);
}

// grid (tiles, heads); kThreads threads. Warp w owns rows w * kRowsPerWarp .. + kRowsPerWarp - 1
// of the tile; per key tile, lane j scores key base + j against those rows, then every lane
// accumulates the dimensions lane, lane + 32, ... (kDims of them) of each row's output.
// Shared memory: Q [kAttentionTileRows][head_dim + kPad], K [kTileKeys][head_dim + kPad],
// V [kTileKeys][head_dim], all f32.
template <class KV, int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_tiled_kernel(const float* q, int heads, int kv_heads, int head_dim,
                           const DeviceSegment* segments, const AttentionTile* tiles, float* out) {
  extern __shared__ float4 shared_memory[];
  const int stride = head_dim + kPad;
  float* qs = reinterpret_cast<float*>(shared_memory);
  float* ks = qs + kAttentionTileRows * stride;
  float* vs = ks + kTileKeys * stride;

  const AttentionTile tile = tiles[blockIdx.x];
  const DeviceSegment seg = segments[tile.segment];
  const int head = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = min(kAttentionTileRows, seg.rows - tile.first);
  const int kv_dim = kv_heads * head_dim;
  const size_t kv_offset = static_cast<size_t>(head / (heads / kv_heads)) * head_dim;
  const KV* k = static_cast<const KV*>(seg.k) + kv_offset;
  const KV* v = static_cast<const KV*>(seg.v) + kv_offset;
  const size_t first_row = static_cast<size_t>(seg.row0) + tile.first;  // in q and out
  const int first_position = seg.start + tile.first;
  const int keys = first_position + rows;  // the tile's last row attends to keys [0, keys)

  // Rows past the segment's end are zero; they are computed along (every row of the tile sees key
  // 0, so no running maximum stays -inf) and never written.
  for (int e = threadIdx.x; e < kAttentionTileRows * head_dim; e += kThreads) {
    const int r = e / head_dim, d = e - r * head_dim;
    qs[r * stride + d] = r < rows ? q[((first_row + r) * heads + head) * head_dim + d] : 0.0f;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));  // as cpu::attention
  float running_max[kRowsPerWarp], sum[kRowsPerWarp], acc[kRowsPerWarp][kDims];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    running_max[r] = -INFINITY;
    sum[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[r][i] = 0.0f;
  }

  for (int base = 0; base < keys; base += kTileKeys) {
    const int count = min(kTileKeys, keys - base);
    __syncthreads();  // Q is in place (first tile); nobody reads the previous K, V tile any more
    for (int e = threadIdx.x; e < kTileKeys * head_dim; e += kThreads) {
      const int j = e / head_dim, d = e - j * head_dim;
      float key = 0.0f, value = 0.0f;
      if (j < count) {
        const size_t at = static_cast<size_t>(base + j) * kv_dim + d;
        key = to_float(k[at]);
        value = to_float(v[at]);
      }
      ks[j * stride + d] = key;
      vs[j * head_dim + d] = value;
    }
    __syncthreads();

    float p[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) p[r] = 0.0f;
    const float* key_row = ks + lane * stride;
    for (int d = 0; d < head_dim; d += 4) {
      const float4 kk = *reinterpret_cast<const float4*>(key_row + d);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qq =
            *reinterpret_cast<const float4*>(qs + (warp * kRowsPerWarp + r) * stride + d);
        p[r] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
      }
    }
    // Online softmax per row, as the row kernel: the tile's maximum joins the running one and the
    // earlier sum and output are rescaled to it.
    const int key = base + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int last = first_position + warp * kRowsPerWarp + r;  // the row's own position
      const bool valid = lane < count && key <= last;
      const float score = valid ? p[r] * scale : -INFINITY;
      const float new_max = fmaxf(running_max[r], warp_max(score));  // finite: key 0 is seen
      p[r] = valid ? expf(score - new_max) : 0.0f;
      const float rescale = expf(running_max[r] - new_max);  // 0 on the first tile
      sum[r] = sum[r] * rescale + warp_sum(p[r]);
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] *= rescale;
      running_max[r] = new_max;
    }
    for (int j = 0; j < count; ++j) {
      float value[kDims];
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int d = lane + 32 * i;
        value[i] = d < head_dim ? vs[j * head_dim + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float weight = __shfl_sync(kFullMask, p[r], j);
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[r][i] += weight * value[i];
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= rows) continue;
    const float inv = 1.0f / sum[r];
    float* o = out + ((first_row + row) * heads + head) * head_dim;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) o[d] = acc[r][i] * inv;
    }
  }
}

template <class KV, int kDims>
void launch(const float* q, const AttentionShape& shape, const DeviceSegment* segments,
            const AttentionTile* tiles, int n_tiles, float* out, cudaStream_t stream) {
  const auto kernel = attention_tiled_kernel<KV, kDims>;
  const size_t bytes = shared_bytes(shape.head_dim);
  // Beyond 48 KiB a kernel must opt in (per device, so on every launch: a cheap host call).
  if (bytes > kDefaultSharedLimit)
    PHOTON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
  kernel<<<dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(shape.heads)), kThreads,
           bytes, stream>>>(q, shape.heads, shape.kv_heads, shape.head_dim, segments, tiles, out);
  check_launch("attention_tiled_kernel");
}

template <class KV>
void launch_typed(const float* q, const AttentionShape& shape, const DeviceSegment* segments,
                  const AttentionTile* tiles, int n_tiles, float* out, cudaStream_t stream) {
  if (shape.head_dim <= 32)
    launch<KV, 1>(q, shape, segments, tiles, n_tiles, out, stream);
  else if (shape.head_dim <= 64)
    launch<KV, 2>(q, shape, segments, tiles, n_tiles, out, stream);
  else
    launch<KV, 4>(q, shape, segments, tiles, n_tiles, out, stream);
}

}  // namespace

bool attention_tiled_supports(const AttentionShape& shape) {
  return shape.head_dim % 4 == 0 && shape.head_dim <= kMaxTiledHeadDim && shape.heads <= 65535;
}

void attention_tiled_launch(const float* q, const AttentionShape& shape, DType kv_dtype,
                            const DeviceSegment* segments, const AttentionTile* tiles, int n_tiles,
                            float* out, cudaStream_t stream) {
  if (n_tiles <= 0) return;
  check(attention_tiled_supports(shape), PHOTON_ERR_INTERNAL,
        "cuda::attention_tiled_launch: unsupported shape (head_dim " +
            std::to_string(shape.head_dim) + ")");
  switch (kv_dtype) {
    case DType::F32: launch_typed<float>(q, shape, segments, tiles, n_tiles, out, stream); break;
    case DType::BF16:
      launch_typed<__nv_bfloat16>(q, shape, segments, tiles, n_tiles, out, stream);
      break;
    case DType::F16: launch_typed<__half>(q, shape, segments, tiles, n_tiles, out, stream); break;
    case DType::Q8: q8_unsupported("attention_tiled_kernel");
  }
}

}  // namespace photon::cuda
