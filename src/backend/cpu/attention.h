// Causal grouped-query attention of query rows against a key/value cache (spec section 2).
#pragma once

#include <span>

#include "core/dtype.h"

namespace photon::cpu {

// Query rows [row0, row0 + rows) sit at positions start .. start + rows - 1 of one sequence whose
// keys and values (rope already applied to keys) are k, v: [start + rows, kv_heads * head_dim]
// of kv_type (f32, bf16 or f16) for one layer. Row i attends to keys 0 .. start + i.
struct AttentionSegment {
  int row0 = 0;
  int rows = 0;
  int start = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  DType kv_type = DType::F32;
};

// q: [n, heads * head_dim]; out: [n, heads * head_dim] (heads concatenated). Query head h reads kv
// head h / (heads / kv_heads). At most `threads` threads share the rows, and the key blocks of
// long rows (a single session decoding a long context uses them all); a row's result depends on
// its own query and keys only, not on the rows beside it or the thread count. 16-bit keys and
// values are widened to f32 exactly: the result is that of an f32 cache holding the same values.
void attention(const float* q, int heads, int kv_heads, int head_dim,
               std::span<const AttentionSegment> segments, float* out, int threads = 1);

}  // namespace photon::cpu
