// The loops of attention_rows.h, written once over an instruction set's traits V (8 f32 lanes):
//   V::Vec, V::zero(), V::broadcast(x)   vectors of 8 floats
//   V::load(p), V::store(p, v)           8 values from a float, Bf16 or F16 row (widened exactly)
//   V::fma(a, b, c), V::fma1(a, b, c)    fused a * b + c, per lane and for one float
//   V::sum8(a), V::scalar(p)             (a[l] + a[l + 4]), + 2, + 1; one value widened
// Each kernel file includes this with its own traits, in an anonymous namespace.
#pragma once

#include "backend/cpu/attention_rows.h"

namespace photon::cpu {
namespace {

template <class V, class T>
void key_scores_of(const CachedRows& k, const float* q, long j0, long n, float scale,
                   float* scores) {
  const T* rows = static_cast<const T*>(k.rows);
  const int whole = k.head_dim / 8 * 8;
  // Keys are the outer loop so that each cached row is read once, front to back, for all the
  // heads: per head it would be strided reads across the whole cache.
  for (long j = 0; j < n; ++j) {
    const T* kj = rows + (j0 + j) * k.stride;
    for (int h = 0; h < k.heads; ++h) {
      const float* qh = q + static_cast<long>(h) * k.head_dim;
      const T* kh = kj + static_cast<long>(h / k.group) * k.head_dim;
      typename V::Vec a = V::zero();
      for (int d = 0; d < whole; d += 8) a = V::fma(V::load(qh + d), V::load(kh + d), a);
      float s = V::sum8(a);
      for (int d = whole; d < k.head_dim; ++d) s = V::fma1(qh[d], V::scalar(kh + d), s);
      scores[h * n + j] = s * scale;
    }
  }
}

template <class V, class T>
void weighted_values_of(const CachedRows& v, const float* weights, long j0, long n, float* out) {
  const T* rows = static_cast<const T*>(v.rows);
  const int whole = v.head_dim / 8 * 8;
  for (long j = 0; j < n; ++j) {
    const T* vj = rows + (j0 + j) * v.stride;
    for (int h = 0; h < v.heads; ++h) {
      const float w = weights[h * n + j];
      const typename V::Vec wv = V::broadcast(w);
      const T* vh = vj + static_cast<long>(h / v.group) * v.head_dim;
      float* oh = out + static_cast<long>(h) * v.head_dim;
      for (int d = 0; d < whole; d += 8)
        V::store(oh + d, V::fma(wv, V::load(vh + d), V::load(oh + d)));
      for (int d = whole; d < v.head_dim; ++d) oh[d] = V::fma1(w, V::scalar(vh + d), oh[d]);
    }
  }
}

template <class V, class T>
constexpr AttentionLoops attention_loops() {
  return {key_scores_of<V, T>, weighted_values_of<V, T>};
}

}  // namespace
}  // namespace photon::cpu
