// Key/value cache of one transformer stack for one sequence: [layers][capacity][kv_dim] for K and
// V, allocated once at its full capacity (never per token). The allocation is not written: only
// the positions a session fills take memory, so a long context costs nothing until it is used.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/uninit_vector.h"

namespace photon {

struct KvCache {
  int layers = 0;
  int capacity = 0;
  int kv_dim = 0;
  int len = 0;               // positions filled
  UninitVector<float> k, v;  // positions >= len are never read

  void allocate(int n_layers, int n_capacity, int dim) {
    layers = n_layers;
    capacity = n_capacity;
    kv_dim = dim;
    len = 0;
    const size_t n = static_cast<size_t>(n_layers) * n_capacity * dim;
    k = {};
    v = {};
    k.resize(n);
    v.resize(n);
  }
  void release() { *this = KvCache(); }
  float* k_at(int layer, int pos) {
    return k.data() + (static_cast<size_t>(layer) * capacity + pos) * kv_dim;
  }
  float* v_at(int layer, int pos) {
    return v.data() + (static_cast<size_t>(layer) * capacity + pos) * kv_dim;
  }
  // Bytes of the positions in use (K and V, f32), as reported by photon_session_kv_bytes.
  uint64_t bytes_in_use() const { return uint64_t{2} * layers * len * kv_dim * sizeof(float); }
  uint64_t bytes_reserved() const {
    return uint64_t{2} * layers * capacity * kv_dim * sizeof(float);
  }
};

}  // namespace photon
