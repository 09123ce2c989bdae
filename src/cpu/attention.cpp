#include "cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace photon::cpu {

namespace {

// One query row of one head: softmax(q.k / sqrt(d)) over keys 0..last, then the weighted sum of v.
void attend_row(const float* q, const float* k, const float* v, int last, int kv_stride,
                int head_dim, float scale, float* scores, float* out) {
  float max = -INFINITY;
  for (int j = 0; j <= last; ++j) {
    const float* kj = k + static_cast<long>(j) * kv_stride;
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += q[d] * kj[d];
    scores[j] = dot * scale;
    max = scores[j] > max ? scores[j] : max;
  }
  float sum = 0.0f;
  for (int j = 0; j <= last; ++j) {
    scores[j] = std::exp(scores[j] - max);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int j = 0; j <= last; ++j) {
    const float w = scores[j] * inv;
    const float* vj = v + static_cast<long>(j) * kv_stride;
    for (int d = 0; d < head_dim; ++d) out[d] += w * vj[d];
  }
}

}  // namespace

void attention(const float* q, int heads, int kv_heads, int head_dim,
               std::span<const AttentionSegment> segments, float* out) {
  const int group = heads / kv_heads;
  const int q_stride = heads * head_dim, kv_stride = kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Flatten (segment row, head) pairs so that a single long segment and many short windows both
  // spread over the threads.
  std::vector<std::pair<int, int>> rows;  // (segment index, row within segment)
  int max_keys = 0;
  for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
    for (int i = 0; i < segments[s].rows; ++i) rows.emplace_back(s, i);
    max_keys = std::max(max_keys, segments[s].start + segments[s].rows);
  }
  const long tasks = static_cast<long>(rows.size()) * heads;
  long work = 0;  // multiply-adds, to keep short windows on the calling thread
  for (const AttentionSegment& seg : segments)
    work += static_cast<long>(seg.rows) * (seg.start + (seg.rows + 1) / 2) * heads * head_dim;
  // Each thread's score row is allocated out here: an exception cannot leave a parallel region.
  const bool parallel = work > (1 << 21);
  std::vector<float> scores(static_cast<size_t>(max_keys) * (parallel ? omp_get_max_threads() : 1));
#pragma omp parallel if (parallel)
  {
    float* thread_scores = scores.data() + static_cast<size_t>(omp_get_thread_num()) * max_keys;
#pragma omp for schedule(dynamic, 4)
    for (long t = 0; t < tasks; ++t) {
      const auto [s, i] = rows[t / heads];
      const int h = static_cast<int>(t % heads);
      const AttentionSegment& seg = segments[s];
      const long row = seg.row0 + i;
      const int kvh = h / group;
      attend_row(q + row * q_stride + h * head_dim, seg.k + kvh * head_dim, seg.v + kvh * head_dim,
                 seg.start + i, kv_stride, head_dim, scale, thread_scores,
                 out + row * q_stride + h * head_dim);
    }
  }
}

}  // namespace photon::cpu
