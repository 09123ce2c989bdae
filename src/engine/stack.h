// A transformer stack S (spec section 2) run over rows from several sequences at once: every
// weight matrix is applied to all rows in one GEMM, attention stays within each sequence.
#pragma once

#include <span>

#include "engine/kv_cache.h"
#include "engine/weights.h"
#include "engine/workspace.h"

namespace photon {

// `rows` consecutive rows of x continue the sequence held by `cache`: they take positions
// cache->len .. cache->len + rows - 1 and are appended to it.
struct StackSegment {
  KvCache* cache;
  int rows;
};

// x: [n, D] in, the stack's final-normed output out (in place); n = sum of segment rows.
void stack_forward(const StackWeights& w, float norm_eps, float rope_theta, const Tensor& x,
                   std::span<const StackSegment> segments, Workspace& ws);

}  // namespace photon
