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
  int heads, group, head_dim;
  float scale;
};

// One segment's keys and values, with the kernel set's loops for their storage type.
struct Cache {
  CachedRows k, v;
  const AttentionLoops& loops;
};

const AttentionLoops& loops_for(DType dtype, const SkinnyKernels& kernels) {
  if (dtype == DType::BF16) return kernels.attention_bf16;
  if (dtype == DType::F16) return kernels.attention_f16;
  return kernels.attention_f32;
}

Cache cache_of(const AttentionSegment& seg, const Shape& s, const SkinnyKernels& kernels) {
  const CachedRows k{host<const char>(seg.k), seg.k.cols, s.heads, s.group, s.head_dim};
  const CachedRows v{host<const char>(seg.v), seg.v.cols, s.heads, s.group, s.head_dim};
  return {k, v, loops_for(seg.k.dtype, kernels)};
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

// out[h] = the sum over keys [j0, j0 + n) of weights[h * n + j] v_(j0 + j), heads concatenated.
void weighted_values(const float* weights, const Cache& c, long j0, long n, const Shape& s,
                     float* out) {
  std::fill(out, out + static_cast<long>(s.heads) * s.head_dim, 0.0f);
  c.loops.weighted_values(c.v, weights, j0, n, out);
}

// One query row of at most kKeyBlock keys, all heads: softmax(q.k / sqrt(d)) over keys 0..n-1,
// then the weighted sum of v. scores: scratch of [heads][n].
void attend_row(const float* q, const Cache& c, long n, const Shape& s, float* scores, float* out) {
  c.loops.key_scores(c.k, q, 0, n, s.scale, scores);
  for (int h = 0; h < s.heads; ++h) {
    float* row = scores + h * n;
    float max;
    const float inv = 1.0f / exponentials(row, n, &max);
    for (long j = 0; j < n; ++j) row[j] *= inv;
  }
  weighted_values(scores, c, 0, n, s, out);
}

// Keys [j0, j0 + n) of a long row: per head its maximum score, the sum of exp(score - maximum)
// and the values weighted by those, unnormalized: partial [heads * (2 + head_dim)].
void attend_block(const float* q, const Cache& c, long j0, long n, const Shape& s, float* scores,
                  float* partial) {
  float* max = partial;
  float* sum = partial + s.heads;
  c.loops.key_scores(c.k, q, j0, n, s.scale, scores);
  for (int h = 0; h < s.heads; ++h) sum[h] = exponentials(scores + h * n, n, &max[h]);
  weighted_values(scores, c, j0, n, s, partial + 2 * s.heads);
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
  const Shape s{heads, heads / shape.kv_heads, head_dim,
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
  // most kKeyBlock keys: splitting its heads over 2 threads made one vanilla-600m session decode
  // 10% slower on a Zen 5).
  if (work <= (1 << 17) || (rows == 1 && max_keys <= kKeyBlock)) threads = 1;
  // Scratch and partials are allocated out here: the loops' items must not throw.
  // Per thread: scores [heads][keys of one item].
  const size_t per_thread = static_cast<size_t>(heads) * std::min(max_keys, kKeyBlock);
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
      const Cache c = cache_of(segments[it.segment], s, kernels);
      float* scores = scratch.data() + static_cast<size_t>(slot) * per_thread;
      if (it.partial < 0)
        attend_row(q + it.row * q_stride, c, it.n, s, scores, out + it.row * q_stride);
      else
        attend_block(q + it.row * q_stride, c, it.j0, it.n, s, scores,
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
