#include "backend/cpu/rmsnorm.h"

#include <cmath>

namespace photon::cpu {

void rmsnorm(const float* x, const float* w, float* y, int n, int d, float eps, int threads) {
#pragma omp parallel for num_threads(threads) if (threads > 1 && \
                                                  static_cast <long>(n) * d > (1 << 18))
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<long>(r) * d;
    float* yr = y + static_cast<long>(r) * d;
    double sum = 0.0;  // a double sum keeps wide rows (chunker norms) accurate
    for (int i = 0; i < d; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / d + eps));
    for (int i = 0; i < d; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

}  // namespace photon::cpu
