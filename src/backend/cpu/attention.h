// Causal grouped-query attention of query rows against a key/value cache (spec section 2).
#pragma once

#include <span>

#include "backend/cpu/skinny_gemm.h"
#include "backend/descriptors.h"

namespace photon::cpu {

// q: [n, heads * head_dim]; out: [n, heads * head_dim] (heads concatenated); each segment's
// caches: CPU tensors of f32, bf16 or f16 with keys after RoPE. Query head h reads kv head
// h / (heads / kv_heads). At most `threads` threads share the rows, and the key blocks of long
// rows (a single session decoding a long context uses them all); a row's result depends on its
// own query and keys only, not on the rows beside it or the thread count. The kernel set's loops
// (attention_rows.h) give the same bits on every CPU; 16-bit keys and values are widened to f32
// exactly: the result is that of an f32 cache holding the same values.
void attention(const float* q, const AttentionShape& shape,
               std::span<const AttentionSegment> segments, float* out, const SkinnyKernels& kernels,
               int threads = 1);

}  // namespace photon::cpu
