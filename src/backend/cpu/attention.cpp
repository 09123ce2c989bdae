#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/host_tensor.h"
#include "backend/cpu/parallel.h"

namespace photon::cpu {

namespace {

// Rows with more keys than this are split into blocks of this many keys, each a work item of its
// own: a partial softmax (its maximum, its sum and its unnormalized weighted values per head),
// combined in block order. So one long row (a single session decoding a long context) spreads
// over the threads, reading each thread's keys front to back, and a row's result depends only on
// its own keys, never on the rows beside it or the threads. Shorter rows stay one item each.
constexpr int kKeyBlock = 512;
// The most floats of partial results held at once (16 MiB): a long prompt's rows are attended in
// waves of whole rows.
constexpr size_t kMaxPartialFloats = size_t{4} << 20;

struct Shape {
  int heads, group, head_dim, kv_stride;
  float scale;
};

// The rows of one segment's keys or values, in the cache's storage type.
struct CacheRows {
  const Tensor& cache;
  const SkinnyKernels& kernels;

  // Row j as f32: in place for an f32 cache, else widened into widened[0 .. cols).
  const float* row(long j, float* widened) const {
    if (cache.dtype == DType::F32) return host(cache) + j * cache.cols;
    if (cache.dtype == DType::BF16)
      kernels.widen_bf16(host<const Bf16>(cache) + j * cache.cols, widened, cache.cols);
    else
      kernels.widen_f16(host<const F16>(cache) + j * cache.cols, widened, cache.cols);
    return widened;
  }
};

// scores[h * n + j] = q_h . k_(j0 + j) * scale for j in [0, n). Keys are the outer loop so that
// each cached row is read once, front to back, for all the heads: per head it would be strided
// reads across the whole cache, which made long-context decoding bound by cache and TLB misses.
void key_scores(const float* q, const CacheRows& k, long j0, long n, const Shape& s, float* scores,
                float* widened) {
  for (long j = 0; j < n; ++j) {
    const float* kj = k.row(j0 + j, widened);
    for (int h = 0; h < s.heads; ++h) {
      const float* qh = q + h * s.head_dim;
      const float* kh = kj + (h / s.group) * s.head_dim;
      float dot = 0.0f;
      // Reordered into vector lanes, the same way on every call: results stay reproducible.
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < s.head_dim; ++d) dot += qh[d] * kh[d];
      scores[h * n + j] = dot * s.scale;
    }
  }
}

// row[j] = exp(row[j] - max) for j in [0, n), with max the row's largest score; returns their sum.
float exponentials(float* row, long n, float* max_out) {
  float max = -INFINITY;
  for (long j = 0; j < n; ++j) max = row[j] > max ? row[j] : max;
  float sum = 0.0f;
  for (long j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }
  *max_out = max;
  return sum;
}

// out[h] = sum over j in [0, n) of weights[h * n + j] v_(j0 + j), heads concatenated.
void weighted_values(const float* weights, const CacheRows& v, long j0, long n, const Shape& s,
                     float* out, float* widened) {
  std::fill(out, out + static_cast<long>(s.heads) * s.head_dim, 0.0f);
  for (long j = 0; j < n; ++j) {
    const float* vj = v.row(j0 + j, widened);
    for (int h = 0; h < s.heads; ++h) {
      const float w = weights[h * n + j];
      const float* vh = vj + (h / s.group) * s.head_dim;
      float* oh = out + h * s.head_dim;
      for (int d = 0; d < s.head_dim; ++d) oh[d] += w * vh[d];
    }
  }
}

// Per-thread scratch: scores [heads][keys of one item], then one widened cache row.
struct Scratch {
  float* scores;
  float* widened;
};

// One query row of at most kKeyBlock keys, all heads: softmax(q.k / sqrt(d)) over keys 0..n-1,
// then the weighted sum of v.
void attend_row(const float* q, const CacheRows& k, const CacheRows& v, long n, const Shape& s,
                const Scratch& scratch, float* out) {
  float* scores = scratch.scores;
  key_scores(q, k, 0, n, s, scores, scratch.widened);
  for (int h = 0; h < s.heads; ++h) {
    float* row = scores + h * n;
    float max;
    const float inv = 1.0f / exponentials(row, n, &max);
    for (long j = 0; j < n; ++j) row[j] *= inv;
  }
  weighted_values(scores, v, 0, n, s, out, scratch.widened);
}

// Keys [j0, j0 + n) of a long row: per head its maximum score, the sum of exp(score - maximum)
// and the values weighted by those, unnormalized: partial [heads * (2 + head_dim)].
void attend_block(const float* q, const CacheRows& k, const CacheRows& v, long j0, long n,
                  const Shape& s, const Scratch& scratch, float* partial) {
  float* max = partial;
  float* sum = partial + s.heads;
  float* scores = scratch.scores;
  key_scores(q, k, j0, n, s, scores, scratch.widened);
  for (int h = 0; h < s.heads; ++h) sum[h] = exponentials(scores + h * n, n, &max[h]);
  weighted_values(scores, v, j0, n, s, partial + 2 * s.heads, scratch.widened);
}

// The blocks' partials of one row, in block order, into its output.
void combine(const float* partials, int blocks, const Shape& s, float* out) {
  const long size = static_cast<long>(s.heads) * (2 + s.head_dim);
  for (int h = 0; h < s.heads; ++h) {
    float max = -INFINITY;
    for (int b = 0; b < blocks; ++b) max = std::max(max, partials[b * size + h]);
    float sum = 0.0f;
    float* oh = out + h * s.head_dim;
    std::fill(oh, oh + s.head_dim, 0.0f);
    for (int b = 0; b < blocks; ++b) {
      const float* p = partials + b * size;
      const float scale = std::exp(p[h] - max);
      sum += p[s.heads + h] * scale;
      const float* acc = p + 2 * s.heads + h * s.head_dim;
      for (int d = 0; d < s.head_dim; ++d) oh[d] += acc[d] * scale;
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < s.head_dim; ++d) oh[d] *= inv;
  }
}

// A work item: keys [j0, j0 + n) of one query row; partial < 0 for a whole row.
struct Item {
  long row;  // the query row (of q and out)
  int segment;
  long j0, n;
  long partial;  // the item's slot of partial results, or -1
};

// A row split into blocks: their partials fill slots [first, first + blocks).
struct LongRow {
  long row;
  long first;
  int blocks;
};

}  // namespace

void attention(const float* q, const AttentionShape& shape,
               std::span<const AttentionSegment> segments, float* out, const SkinnyKernels& kernels,
               int threads) {
  const int heads = shape.heads, head_dim = shape.head_dim;
  const Shape s{heads, heads / shape.kv_heads, head_dim, shape.kv_dim(),
                1.0f / std::sqrt(static_cast<float>(head_dim))};
  const long q_stride = static_cast<long>(heads) * head_dim;
  const long partial_size = static_cast<long>(heads) * (2 + head_dim);
  long work = 0;  // multiply-adds, to keep short windows on the calling thread
  long rows = 0;
  int max_keys = 0;
  for (const AttentionSegment& seg : segments) {
    work += static_cast<long>(seg.rows) * (seg.start + (seg.rows + 1) / 2) * heads * head_dim;
    rows += seg.rows;
    max_keys = std::max(max_keys, seg.start + seg.rows);
  }
  // Waking the other threads costs tens of microseconds: worth it from about 2^17 multiply-adds
  // (one row of 1,024 keys at 256 values per key), and never for a single item (one row of at
  // most kKeyBlock keys).
  if (work <= (1 << 17) || (rows == 1 && max_keys <= kKeyBlock)) threads = 1;
  // Scratch and partials are allocated out here: the loops' items must not throw.
  const size_t score_floats = static_cast<size_t>(heads) * std::min(max_keys, kKeyBlock);
  const size_t per_thread = score_floats + static_cast<size_t>(s.kv_stride);
  std::vector<float> scratch(per_thread * std::max(1, threads));
  std::vector<Item> items;
  std::vector<LongRow> long_rows;  // of the current wave
  std::vector<float> partials;
  const size_t wave_floats =
      std::max<size_t>(kMaxPartialFloats,
                       static_cast<size_t>((max_keys + kKeyBlock - 1) / kKeyBlock) * partial_size);

  auto run_wave = [&] {
    parallel_for(threads, static_cast<long>(items.size()), [&](long i, int slot) {
      const Item& it = items[i];
      const AttentionSegment& seg = segments[it.segment];
      const CacheRows k{seg.k, kernels}, v{seg.v, kernels};
      float* mine = scratch.data() + static_cast<size_t>(slot) * per_thread;
      const Scratch thread_scratch{mine, mine + score_floats};
      if (it.partial < 0)
        attend_row(q + it.row * q_stride, k, v, it.n, s, thread_scratch, out + it.row * q_stride);
      else
        attend_block(q + it.row * q_stride, k, v, it.j0, it.n, s, thread_scratch,
                     partials.data() + it.partial * partial_size);
    });
    parallel_for(threads, static_cast<long>(long_rows.size()), [&](long r, int) {
      const LongRow& row = long_rows[r];
      combine(partials.data() + row.first * partial_size, row.blocks, s, out + row.row * q_stride);
    });
    items.clear();
    long_rows.clear();
  };

  long slots = 0;  // partial slots taken in this wave
  for (int seg_index = 0; seg_index < static_cast<int>(segments.size()); ++seg_index) {
    const AttentionSegment& seg = segments[seg_index];
    for (int i = 0; i < seg.rows; ++i) {
      const long row = seg.row0 + i, keys = seg.start + i + 1;
      if (keys <= kKeyBlock) {
        items.push_back({row, seg_index, 0, keys, -1});
        continue;
      }
      const long blocks = (keys + kKeyBlock - 1) / kKeyBlock;
      if (static_cast<size_t>(slots + blocks) * partial_size > wave_floats) {
        run_wave();
        slots = 0;
      }
      if (partials.size() < static_cast<size_t>(slots + blocks) * partial_size)
        partials.resize(
            std::min(wave_floats, 2 * static_cast<size_t>(slots + blocks) * partial_size));
      long_rows.push_back({row, slots, static_cast<int>(blocks)});
      for (long b = 0; b < blocks; ++b) {
        const long j0 = b * kKeyBlock;
        items.push_back({row, seg_index, j0, std::min<long>(kKeyBlock, keys - j0), slots++});
      }
    }
  }
  run_wave();
}

}  // namespace photon::cpu
