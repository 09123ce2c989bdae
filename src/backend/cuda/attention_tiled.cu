#include "backend/cuda/attention.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kAttentionTileRows / kWarps;
constexpr int kKeysPerLane = 2;
constexpr int kTileKeys = 32 * kKeysPerLane;
constexpr size_t kDefaultSharedLimit = 48 << 10;

// Floats per Q and K row in shared memory: a multiple of 32 plus 4, so that rows stay 16-byte
// aligned and the eight lanes of a 16-byte load reading the same column of 8 different K rows fall
// in different banks.
__host__ __device__ inline int padded_stride(int head_dim) {
  return (head_dim + 31) / 32 * 32 + 4;
}

size_t shared_bytes(int head_dim) {
  const size_t padded =
      static_cast<size_t>(kAttentionTileRows + kTileKeys) * padded_stride(head_dim);
  return sizeof(float) * (padded + static_cast<size_t>(kTileKeys) * head_dim +
                          static_cast<size_t>(kAttentionTileRows) * kTileKeys);
}

// grid (tiles, heads); kThreads threads. Warp w owns rows w * kRowsPerWarp .. + kRowsPerWarp - 1
// of the tile; per key tile, lane j scores keys base + j and base + 32 + j against those rows and
// writes their weights to the warp's rows of P, then every lane accumulates the dimensions lane,
// lane + 32, ... (kDims of them) of each row's output over the tile's keys in order, four weights
// of a row read at once. Two keys per lane and P in shared memory keep the loads and shuffles
// below the multiply-adds.
// Shared memory: Q [kAttentionTileRows][stride], K [kTileKeys][stride], V [kTileKeys][head_dim],
// P [kAttentionTileRows][kTileKeys], all f32.
template <class KV, int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_tiled_kernel(const float* q, int heads, int kv_heads, int head_dim,
                           const DeviceSegment* segments, const AttentionTile* tiles, float* out) {
  extern __shared__ float4 shared_memory[];
  const int stride = padded_stride(head_dim);
  float* qs = reinterpret_cast<float*>(shared_memory);
  float* ks = qs + kAttentionTileRows * stride;
  float* vs = ks + kTileKeys * stride;
  float* ps = vs + kTileKeys * head_dim;

  const AttentionTile tile = tiles[blockIdx.x];
  const DeviceSegment seg = segments[tile.segment];
  const int head = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* warp_p = ps + warp * kRowsPerWarp * kTileKeys;
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
    __syncthreads();  // Q is in place (first tile); nobody reads the previous K, V, P tile any more
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

    float p[kKeysPerLane][kRowsPerWarp];
#pragma unroll
    for (int c = 0; c < kKeysPerLane; ++c)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) p[c][r] = 0.0f;
    for (int d = 0; d < head_dim; d += 4) {
      float4 kk[kKeysPerLane];
#pragma unroll
      for (int c = 0; c < kKeysPerLane; ++c)
        kk[c] = *reinterpret_cast<const float4*>(ks + (lane + 32 * c) * stride + d);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qq =
            *reinterpret_cast<const float4*>(qs + (warp * kRowsPerWarp + r) * stride + d);
#pragma unroll
        for (int c = 0; c < kKeysPerLane; ++c)
          p[c][r] += qq.x * kk[c].x + qq.y * kk[c].y + qq.z * kk[c].z + qq.w * kk[c].w;
      }
    }
    // Online softmax per row, as the row kernel: the tile's maximum joins the running one and the
    // earlier sum and output are rescaled to it. Keys the row may not see weigh 0.
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int last = first_position + warp * kRowsPerWarp + r;  // the row's own position
      float score[kKeysPerLane], tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < kKeysPerLane; ++c) {
        const int j = lane + 32 * c;
        score[c] = j < count && base + j <= last ? p[c][r] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, score[c]);
      }
      const float new_max = fmaxf(running_max[r], warp_max(tile_max));  // finite: key 0 is seen
      float weights = 0.0f;
#pragma unroll
      for (int c = 0; c < kKeysPerLane; ++c) {
        const float w = score[c] == -INFINITY ? 0.0f : expf(score[c] - new_max);
        warp_p[r * kTileKeys + lane + 32 * c] = w;
        weights += w;
      }
      const float rescale = expf(running_max[r] - new_max);  // 0 on the first tile
      sum[r] = sum[r] * rescale + warp_sum(weights);
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[r][i] *= rescale;
      running_max[r] = new_max;
    }
    __syncwarp();  // the warp's P is written
    // Keys past count weigh 0 and their values are 0: four keys at a time up to the tile's end.
    for (int j = 0; j < count; j += 4) {
      float value[4][kDims];
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int i = 0; i < kDims; ++i) {
          const int d = lane + 32 * i;
          value[t][i] = d < head_dim ? vs[(j + t) * head_dim + d] : 0.0f;
        }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 w = *reinterpret_cast<const float4*>(warp_p + r * kTileKeys + j);
#pragma unroll
        for (int i = 0; i < kDims; ++i) {
          acc[r][i] += w.x * value[0][i];
          acc[r][i] += w.y * value[1][i];
          acc[r][i] += w.z * value[2][i];
          acc[r][i] += w.w * value[3][i];
        }
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
