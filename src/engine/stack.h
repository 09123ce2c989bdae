// A transformer stack S (spec section 2) run over rows from several sequences at once: every
// weight matrix is applied to all rows in one GEMM, attention stays within each sequence.
#pragma once

#include <span>
#include <vector>

#include "cpu/attention.h"
#include "cpu/rope.h"
#include "engine/kv_cache.h"
#include "engine/weights.h"

namespace photon {

// `rows` consecutive rows of x continue the sequence held by `cache`: they take positions
// cache->len .. cache->len + rows - 1 and are appended to it.
struct StackSegment {
  KvCache* cache;
  int rows;
};

// Buffers reused across calls so that steady decoding does not allocate.
struct StackScratch {
  std::vector<float> xn, q, k, v, att, gate, up;
  std::vector<int64_t> positions;
  std::vector<cpu::AttentionSegment> attention;
  cpu::RopeTable rope;
};

// x: [n, D] in, the stack's final-normed output out (in place); n = sum of segment rows.
void stack_forward(const StackWeights& w, float norm_eps, float rope_theta, float* x,
                   std::span<const StackSegment> segments, StackScratch& scratch);

}  // namespace photon
