// A transformer stack S (spec section 2) run over rows from several sequences at once: every
// weight matrix is applied to all rows in one GEMM, attention stays within each sequence.
#pragma once

#include <span>

#include "engine/kv_cache.h"
#include "engine/scratch.h"
#include "engine/weights.h"

namespace photon {

// `rows` consecutive rows of x continue the sequence held by `cache`: they take positions
// cache->len .. cache->len + rows - 1 and are appended to it.
struct StackSegment {
  KvCache* cache;
  int rows;
};

// What stack_forward writes besides x: each layer's activations.
struct StackScratch {
  Scratch normed, query, key, value, attended, gate, up, rope;
};

// x: [n, D] in, the stack's final-normed output out (in place); n = sum of segment rows.
void stack_forward(Backend& b, const StackWeights& w, float norm_eps, float rope_theta,
                   const Tensor& x, std::span<const StackSegment> segments, StackScratch& scratch);

}  // namespace photon
