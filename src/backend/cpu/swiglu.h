// SwiGLU gate: g = silu(g) * u, elementwise (spec section 2).
#pragma once

#include <cstddef>

namespace photon::cpu {

// gate, up: [n] ; gate is overwritten with the product. At most `threads` threads.
void swiglu(float* gate, const float* up, size_t n, int threads = 1);

}  // namespace photon::cpu
