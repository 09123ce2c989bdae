#include "backend/cpu/rope.h"

#include <cmath>
#include <vector>

#include "backend/cpu/parallel.h"

namespace photon::cpu {

void rope_table(const int64_t* positions, int n, int head_dim, float theta, float* table) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
  float* cos = table;
  float* sin = table + static_cast<size_t>(n) * half;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[r]) * inv_freq[i];
      cos[static_cast<size_t>(r) * half + i] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(r) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_apply(float* x, int n, int heads, int head_dim, const float* table, int threads) {
  const int half = head_dim / 2;
  const float* cos = table;
  const float* sin = table + static_cast<size_t>(n) * half;
  parallel_rows(threads, n, static_cast<long>(heads) * head_dim, 1L << 17,
                [&](long first, long end) {
                  for (long r = first; r < end; ++r) {
                    const float* c = cos + r * half;
                    const float* s = sin + r * half;
                    for (int h = 0; h < heads; ++h) {
                      float* v = x + (r * heads + h) * head_dim;
                      for (int i = 0; i < half; ++i) {
                        const float a = v[i], b = v[i + half];
                        v[i] = a * c[i] - b * s[i];
                        v[i + half] = b * c[i] + a * s[i];
                      }
                    }
                  }
                });
}

}  // namespace photon::cpu
