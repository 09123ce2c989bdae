#include "backend/cpu/swiglu.h"

#include <cmath>

namespace photon::cpu {

void swiglu(float* gate, const float* up, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) if (threads > 1 && n > (1 << 18))
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace photon::cpu
