// Key/value cache of one transformer stack for one sequence: K and V [layers * capacity, kv_dim]
// in backend memory, allocated once at its full capacity (never per token) and not written until
// used, so a long context costs nothing until it is filled. Stored in f32 (exact), or in bf16 or
// f16 (the session's kv type: half the memory, each key and value rounded once when appended).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace photon {

struct KvCache {
  int layers = 0;
  int capacity = 0;
  int kv_dim = 0;
  int len = 0;  // positions filled; positions >= len are never read
  DType dtype = DType::F32;
  Matrix k, v;

  void allocate(Backend& backend, int n_layers, int n_capacity, int dim, DType type) {
    layers = n_layers;
    capacity = n_capacity;
    kv_dim = dim;
    len = 0;
    dtype = type;
    k = {};
    v = {};
    const int64_t rows = static_cast<int64_t>(n_layers) * n_capacity;
    k = new_matrix(backend, rows, dim, "KV cache keys", type);
    v = new_matrix(backend, rows, dim, "KV cache values", type);
  }
  // One layer's [capacity, kv_dim] keys or values.
  Tensor k_layer(int layer) const {
    return k.slice(static_cast<int64_t>(layer) * capacity, capacity);
  }
  Tensor v_layer(int layer) const {
    return v.slice(static_cast<int64_t>(layer) * capacity, capacity);
  }
  // Bytes of the positions in use (K and V), as reported by photon_session_kv_bytes.
  uint64_t bytes_in_use() const { return uint64_t{2} * layers * len * kv_dim * dtype_size(dtype); }
};

}  // namespace photon
