#include "engine/stack.h"

#include <vector>

namespace photon {

void stack_forward(Backend& b, const StackWeights& w, float norm_eps, float rope_theta,
                   const Tensor& x, std::span<const StackSegment> segments, StackScratch& scratch) {
  const StackConfig& c = w.config;
  const int d = w.dim, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn_dim;
  int n = 0;
  for (const StackSegment& seg : segments) {
    if (seg.cache->len + seg.rows > seg.cache->capacity)
      fail(PHOTON_ERR_INTERNAL, "stack_forward: a KV cache of capacity " +
                                    std::to_string(seg.cache->capacity) + " would overflow");
    seg.cache->reserve(b, seg.cache->len + seg.rows);
    n += seg.rows;
  }
  if (n == 0) return;
  const Tensor xn = scratch.normed.get(b, n, d);      // [n, D]
  const Tensor q = scratch.query.get(b, n, qd);       // [n, H d_h]
  const Tensor k = scratch.key.get(b, n, kvd);        // [n, H_kv d_h]
  const Tensor v = scratch.value.get(b, n, kvd);      // [n, H_kv d_h]
  const Tensor att = scratch.attended.get(b, n, qd);  // [n, H d_h]
  const Tensor gate = scratch.gate.get(b, n, f);      // [n, F]
  const Tensor up = scratch.up.get(b, n, f);          // [n, F]
  const Tensor rope = scratch.rope.get(b, 2 * n, c.head_dim / 2);
  std::vector<int64_t> positions;
  positions.reserve(n);
  for (const StackSegment& seg : segments)
    for (int i = 0; i < seg.rows; ++i) positions.push_back(seg.cache->len + i);
  b.rope_table(positions, c.head_dim, rope_theta, rope);

  const AttentionShape shape{c.heads, c.kv_heads, c.head_dim};
  std::vector<AttentionSegment> attention(segments.size());
  for (int layer = 0; layer < c.layers; ++layer) {
    const LayerWeights& lw = w.layers[layer];
    b.rmsnorm(x, lw.attn_norm, xn, norm_eps);
    const LinearOut qkv[] = {{lw.wq, q}, {lw.wk, k}, {lw.wv, v}};
    b.linear_group(xn, qkv);
    b.rope(q, c.heads, rope);
    b.rope(k, c.kv_heads, rope);
    int row = 0;
    for (size_t i = 0; i < segments.size(); ++i) {
      const KvCache& cache = *segments[i].cache;
      attention[i] = {row, segments[i].rows, cache.len, cache.k_layer(layer), cache.v_layer(layer)};
      row += segments[i].rows;
    }
    b.kv_append(k, v, attention);
    b.attention(q, shape, attention, att);
    b.linear(att, lw.wo, nullptr, x, /*accumulate=*/true);

    b.rmsnorm(x, lw.ffn_norm, xn, norm_eps);
    const LinearOut gate_up[] = {{lw.w_gate, gate}, {lw.w_up, up}};
    b.linear_group(xn, gate_up);
    b.swiglu(gate, up);
    b.linear(gate, lw.w_down, nullptr, x, /*accumulate=*/true);
  }
  for (const StackSegment& seg : segments) seg.cache->len += seg.rows;
  b.rmsnorm(x, w.norm, x, norm_eps);
}

}  // namespace photon
