// Key/value cache of one transformer stack for one sequence: K and V [layers * allocated, kv_dim]
// in backend memory, one after the other in one buffer. It holds up to `capacity` positions (the
// session's context at its level) but allocates room for fewer and grows in steps as positions are
// appended (reserve(): at least double, never per token), so that a session's memory follows its
// length, which the serving engine's memory budget counts. Growing copies the filled positions
// unchanged, so results never depend on the allocation. Stored in f32 (exact), or in bf16 or f16
// (the session's kv type: half the memory, each key and value rounded once when appended).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace photon {

struct KvCache {
  // Positions allocated when a cache is made, unless its capacity is smaller.
  static constexpr int kFirstPositions = 64;

  int layers = 0;
  int capacity = 0;   // the most positions it may hold
  int allocated = 0;  // positions its buffers hold now, <= capacity
  int kv_dim = 0;
  int len = 0;  // positions filled; positions >= len are never read
  DType dtype = DType::F32;

  // first: the positions allocated now (at most capacity), more than kFirstPositions where the
  // caller knows that many are coming.
  void allocate(Backend& backend, int n_layers, int n_capacity, int dim, DType type,
                int first = kFirstPositions) {
    layers = n_layers;
    capacity = n_capacity;
    kv_dim = dim;
    len = 0;
    dtype = type;
    allocated = 0;
    kv_ = {};
    grow_to(backend, std::min(capacity, std::max(first, kFirstPositions)));
  }
  // Makes room for `positions` (<= capacity) positions, keeping the filled ones.
  void reserve(Backend& backend, int positions) {
    if (positions > allocated) grow_to(backend, grown_size(positions));
  }
  // Bytes reserve(positions) would allocate (the old buffers live until the new ones are
  // filled), 0 when the cache has room.
  uint64_t growth_bytes(int positions) const {
    if (positions <= allocated) return 0;
    return bytes_for(grown_size(std::min(positions, capacity)));
  }
  // Bytes of the buffers (K and V) as allocated now.
  uint64_t allocated_bytes() const { return bytes_for(allocated); }
  // One layer's [allocated, kv_dim] keys or values.
  Tensor k_layer(int layer) const { return layer_rows(kv_, layer, allocated); }
  Tensor v_layer(int layer) const { return layer_rows(kv_, layers + layer, allocated); }
  // Bytes of the positions in use (K and V), as reported by photon_session_kv_bytes.
  uint64_t bytes_in_use() const { return uint64_t{2} * layers * len * kv_dim * dtype_size(dtype); }

 private:
  static Tensor layer_rows(const Matrix& kv, int block, int positions) {
    return kv.slice(static_cast<int64_t>(block) * positions, positions);
  }
  void grow_to(Backend& backend, int grown) {
    if (len == 0) kv_ = {};  // nothing to keep: the old buffer goes first
    Matrix grown_kv = new_matrix(backend, 2 * static_cast<int64_t>(layers) * grown, kv_dim,
                                 "KV cache keys and values", dtype);
    if (len > 0) {
      std::vector<RowCopy> copies;
      copies.reserve(2 * static_cast<size_t>(layers));
      for (int block = 0; block < 2 * layers; ++block)
        copies.push_back({layer_rows(grown_kv, block, grown).slice(0, len),
                          layer_rows(kv_, block, allocated).slice(0, len)});
      backend.copy_rows(copies);
    }
    kv_ = std::move(grown_kv);
    allocated = grown;
  }
  int grown_size(int positions) const {
    return std::min(capacity, std::max({positions, 2 * allocated, kFirstPositions}));
  }
  uint64_t bytes_for(int positions) const {
    return uint64_t{2} * layers * static_cast<uint64_t>(positions) * kv_dim * dtype_size(dtype);
  }

  Matrix kv_;  // [2 * layers * allocated, kv_dim]: every layer's keys, then every layer's values
};

}  // namespace photon
