#include "backend/cpu/rmsnorm.h"

#include <cmath>

#include "backend/cpu/parallel.h"

namespace photon::cpu {

void rmsnorm(const float* x, const float* w, float* y, int n, int d, float eps, int threads) {
  parallel_rows(threads, n, d, 1L << 17, [&](long first, long end) {
    for (long r = first; r < end; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      double sum = 0.0;  // a double sum keeps wide rows (chunker norms) accurate
      for (int i = 0; i < d; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float scale = static_cast<float>(1.0 / std::sqrt(sum / d + eps));
      for (int i = 0; i < d; ++i) yr[i] = xr[i] * scale * w[i];
    }
  });
}

}  // namespace photon::cpu
