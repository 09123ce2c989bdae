#include "backend/cpu/swiglu.h"

#include <cmath>

#include "backend/cpu/parallel.h"

namespace photon::cpu {

void swiglu(float* gate, const float* up, size_t n, int threads) {
  parallel_rows(threads, static_cast<long>(n), 1, 1L << 17, [&](long first, long end) {
    for (long i = first; i < end; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

}  // namespace photon::cpu
