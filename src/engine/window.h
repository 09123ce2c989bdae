// A local decoder window (spec section 3.3): the decoder stack of one level-l unit run over its
// prefix rows and the inputs of its children so far. It holds at most R + C - 1 positions, so its
// KV cache is a small fixed buffer that is reused when the next unit opens.
#pragma once

#include "engine/kv_cache.h"

namespace photon {

struct Window {
  int prefix_len = 0;  // R
  int chunk_len = 0;   // C
  int width = 0;       // E, the decoder stack's width
  KvCache cache;
  Matrix outputs;  // [C, E]: o_0 .. o_{C-1} as far as computed
  int n_outputs = 0;
  int consumed = 0;  // children consumed (RecGen level 1 records the last one without a run)

  void allocate(Backend& backend, int layers, int kv_dim, int r, int c, int e, DType kv_type) {
    prefix_len = r;
    chunk_len = c;
    width = e;
    cache.allocate(backend, layers, r + c - 1, kv_dim, kv_type);
    outputs = zero_matrix(backend, c, e, "window outputs");
    n_outputs = consumed = 0;
  }
  Tensor output(int j) const { return outputs.row(j); }
  Tensor latest() const { return output(n_outputs - 1); }
  // Drops every child after the first `children` (their positions and outputs).
  void truncate(int children) {
    consumed = children;
    const int fed = children < chunk_len - 1 ? children : chunk_len - 1;
    cache.len = prefix_len + fed;
    n_outputs = fed + 1;
  }
};

}  // namespace photon
