// The inner loops of attention (attention.cpp) over one query row's cached keys and values, per
// storage type of the cache, in every kernel set (skinny_gemm.h). Their order of the arithmetic is
// fixed and the same in every set, so that attention gives the same bits on every CPU:
//   key scores       per key j and head h: eight lane sums a[l] = fma(q[8 i + l], k[8 i + l],
//                    a[l]) over the whole groups of 8 elements (ascending), then (a[l] + a[l + 4]),
//                    + 2, + 1, then each remaining element d in turn, s = fma(q[d], k[d], s); the
//                    score is s * scale
//   weighted values  out_h[d] = fma(w_hj, v_j[d], out_h[d]) over the keys j in ascending order
// 16-bit keys and values enter widened to f32 exactly: the result is that of an f32 cache holding
// the same values.
#pragma once

namespace photon::cpu {

// One segment's cached keys or values: rows [keys, stride] in the cache's storage type. Query head
// h reads kv head h / group, columns [(h / group) * head_dim, + head_dim).
struct CachedRows {
  const void* rows;
  long stride;
  int heads, group, head_dim;
};

struct AttentionLoops {
  // scores[h * n + j] = scale * q_h . k_(j0 + j) for j in [0, n); q: [heads * head_dim].
  void (*key_scores)(const CachedRows& k, const float* q, long j0, long n, float scale,
                     float* scores);
  // out_h += the sum over j in [0, n) of weights[h * n + j] v_(j0 + j), heads concatenated in out.
  void (*weighted_values)(const CachedRows& v, const float* weights, long j0, long n, float* out);
};

}  // namespace photon::cpu
