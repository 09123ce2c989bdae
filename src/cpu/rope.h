// Rotary position embedding, rotate-half convention (spec section 2).
#pragma once

#include <cstdint>
#include <vector>

namespace photon::cpu {

// Per-row rotation table: cos/sin of pos * theta_i for i in [0, head_dim/2), computed in double so
// that long contexts keep their angles exact. Built once per stack call and shared by its layers.
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [n, half]
  void build(const int64_t* positions, int n, int head_dim, float theta);
};

// x: [n, heads * head_dim]; rotates every head of row r with the table's row r.
void rope_apply(float* x, int n, int heads, int head_dim, const RopeTable& table);

}  // namespace photon::cpu
