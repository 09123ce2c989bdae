#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/parallel.h"

namespace photon::cpu {

namespace {

// One query row, all heads: softmax(q.k / sqrt(d)) over keys 0..last, then the weighted
// sum of v. Keys are the outer loop so that each cached row is read once, front to back, for all
// the heads: per head it would be strided reads across the whole cache, which made long-context
// decoding bound by cache and TLB misses. scores: [heads][last + 1].
void attend_row(const float* q, const float* k, const float* v, int last, int kv_stride, int heads,
                int group, int head_dim, float scale, float* scores, float* out) {
  const long n = last + 1;
  for (long j = 0; j < n; ++j) {
    const float* kj = k + j * kv_stride;
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + h * head_dim;
      const float* kh = kj + (h / group) * head_dim;
      float dot = 0.0f;
      // Reordered into vector lanes, the same way on every call: results stay reproducible.
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < head_dim; ++d) dot += qh[d] * kh[d];
      scores[h * n + j] = dot * scale;
    }
  }
  for (int h = 0; h < heads; ++h) {
    float* row = scores + h * n;
    float max = -INFINITY;
    for (long j = 0; j < n; ++j) max = row[j] > max ? row[j] : max;
    float sum = 0.0f;
    for (long j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (long j = 0; j < n; ++j) row[j] *= inv;
    for (int d = 0; d < head_dim; ++d) out[h * head_dim + d] = 0.0f;
  }
  for (long j = 0; j < n; ++j) {
    const float* vj = v + j * kv_stride;
    for (int h = 0; h < heads; ++h) {
      const float w = scores[h * n + j];
      const float* vh = vj + (h / group) * head_dim;
      float* oh = out + h * head_dim;
      for (int d = 0; d < head_dim; ++d) oh[d] += w * vh[d];
    }
  }
}

}  // namespace

void attention(const float* q, int heads, int kv_heads, int head_dim,
               std::span<const AttentionSegment> segments, float* out, int threads) {
  const int group = heads / kv_heads;
  const int q_stride = heads * head_dim, kv_stride = kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Flatten the rows of all segments, so that a single long segment and many short windows both
  // spread over the threads.
  std::vector<std::pair<int, int>> rows;  // (segment index, row within segment)
  int max_keys = 0;
  for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
    for (int i = 0; i < segments[s].rows; ++i) rows.emplace_back(s, i);
    max_keys = std::max(max_keys, segments[s].start + segments[s].rows);
  }
  long work = 0;  // multiply-adds, to keep short windows on the calling thread
  for (const AttentionSegment& seg : segments)
    work += static_cast<long>(seg.rows) * (seg.start + (seg.rows + 1) / 2) * heads * head_dim;
  // Rows are the unit of work (one row, a single session decoding, stays on the calling thread
  // however long its context), so that each row's arithmetic is the same whatever the threads.
  if (work <= (1 << 21)) threads = 1;
  // Each thread's scores are allocated out here: the loop's items must not throw.
  const size_t per_thread = static_cast<size_t>(heads) * max_keys;
  std::vector<float> scores(per_thread * std::max(1, threads));
  parallel_for(threads, static_cast<long>(rows.size()), [&](long t, int slot) {
    const auto [s, i] = rows[t];
    const AttentionSegment& seg = segments[s];
    const long row = seg.row0 + i;
    attend_row(q + row * q_stride, seg.k, seg.v, seg.start + i, kv_stride, heads, group, head_dim,
               scale, scores.data() + static_cast<size_t>(slot) * per_thread, out + row * q_stride);
  });
}

}  // namespace photon::cpu
