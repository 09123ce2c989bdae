#include "engine/stack.h"

#include <cstring>

#include "cpu/gemm.h"
#include "cpu/rmsnorm.h"
#include "cpu/swiglu.h"

namespace photon {

void stack_forward(const StackWeights& w, float norm_eps, float rope_theta, float* x,
                   std::span<const StackSegment> segments, StackScratch& s) {
  const StackConfig& c = w.config;
  const int d = w.dim, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_dim;
  int n = 0;
  for (const StackSegment& seg : segments) {
    if (seg.cache->len + seg.rows > seg.cache->capacity)
      fail(PHOTON_ERR_INTERNAL, "stack_forward: a KV cache of capacity " +
                                    std::to_string(seg.cache->capacity) + " would overflow");
    n += seg.rows;
  }
  if (n == 0) return;
  s.xn.resize(static_cast<size_t>(n) * d);
  s.q.resize(static_cast<size_t>(n) * qd);
  s.k.resize(static_cast<size_t>(n) * kvd);
  s.v.resize(static_cast<size_t>(n) * kvd);
  s.att.resize(static_cast<size_t>(n) * qd);
  s.gate.resize(static_cast<size_t>(n) * f);
  s.up.resize(static_cast<size_t>(n) * f);
  s.positions.resize(n);
  {
    int r = 0;
    for (const StackSegment& seg : segments)
      for (int i = 0; i < seg.rows; ++i) s.positions[r++] = seg.cache->len + i;
  }
  s.rope.build(s.positions.data(), n, c.head_dim, rope_theta);

  for (int layer = 0; layer < c.layers; ++layer) {
    const LayerWeights& lw = w.layers[layer];
    cpu::rmsnorm(x, lw.attn_norm, s.xn.data(), n, d, norm_eps);
    cpu::linear(s.xn.data(), n, d, lw.wq, qd, nullptr, s.q.data());
    cpu::linear(s.xn.data(), n, d, lw.wk, kvd, nullptr, s.k.data());
    cpu::linear(s.xn.data(), n, d, lw.wv, kvd, nullptr, s.v.data());
    cpu::rope_apply(s.q.data(), n, c.heads, c.head_dim, s.rope);
    cpu::rope_apply(s.k.data(), n, c.kv_heads, c.head_dim, s.rope);
    s.attention.clear();
    int row = 0;
    for (const StackSegment& seg : segments) {
      KvCache& cache = *seg.cache;
      const size_t bytes = static_cast<size_t>(seg.rows) * kvd * sizeof(float);
      std::memcpy(cache.k_at(layer, cache.len), s.k.data() + static_cast<size_t>(row) * kvd, bytes);
      std::memcpy(cache.v_at(layer, cache.len), s.v.data() + static_cast<size_t>(row) * kvd, bytes);
      s.attention.push_back({row, seg.rows, cache.len, cache.k_at(layer, 0), cache.v_at(layer, 0)});
      row += seg.rows;
    }
    cpu::attention(s.q.data(), c.heads, c.kv_heads, c.head_dim, s.attention, s.att.data());
    cpu::linear(s.att.data(), n, qd, lw.wo, d, nullptr, x, /*accumulate=*/true);

    cpu::rmsnorm(x, lw.ffn_norm, s.xn.data(), n, d, norm_eps);
    cpu::linear(s.xn.data(), n, d, lw.w_gate, f, nullptr, s.gate.data());
    cpu::linear(s.xn.data(), n, d, lw.w_up, f, nullptr, s.up.data());
    cpu::swiglu(s.gate.data(), s.up.data(), static_cast<size_t>(n) * f);
    cpu::linear(s.gate.data(), n, f, lw.w_down, d, nullptr, x, /*accumulate=*/true);
  }
  for (const StackSegment& seg : segments) seg.cache->len += seg.rows;
  cpu::rmsnorm(x, w.norm, x, n, d, norm_eps);
}

}  // namespace photon
