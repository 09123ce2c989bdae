// Rotary position embedding, rotate-half convention (spec section 2).
#pragma once

#include <cstdint>

namespace photon::cpu {

// table: [2n, head_dim / 2]: rows 0 .. n-1 hold cos(positions[r] * theta_i), rows n .. 2n-1 the
// sines, theta_i = theta^(-2i / head_dim). Computed in double so that long contexts keep their
// angles exact; built once per stack call and shared by its layers.
void rope_table(const int64_t* positions, int n, int head_dim, float theta, float* table);

// x: [n, heads * head_dim]; rotates every head of row r with the table's row r, on at most
// `threads` threads.
void rope_apply(float* x, int n, int heads, int head_dim, const float* table, int threads = 1);

}  // namespace photon::cpu
