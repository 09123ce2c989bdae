#include "backend/cpu/quantize_int8.h"

#include <cmath>
#include <limits>

namespace photon::cpu {

// Comparisons rather than std::fmax / std::fmin, which are library calls here and keep the loops
// from being vectorized; no value compared is NaN (a block with one is handled apart).
void quantize_int8(const float* x, long n, int in, int8_t* q, float* d) {
  const long values = n * in;
  for (long b = 0; b < values; b += 32) {
    const float* block = x + b;
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(block[i]);
      finite = finite && a <= std::numeric_limits<float>::max();
      amax = a > amax ? a : amax;
    }
    int8_t* out = q + b;
    const float scale = amax / 127.0f;  // 0 for zeros, and for values below 127 x 2^-149
    if (!finite || scale == 0) {
      d[b / 32] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      for (int i = 0; i < 32; ++i) out[i] = 0;
      continue;
    }
    d[b / 32] = scale;
    for (int i = 0; i < 32; ++i) {
      // 1.5 x 2^23 added and taken away rounds |v| <= 2^22 to an integer, ties to even.
      float v = (block[i] / scale + 0x1.8p23f) - 0x1.8p23f;
      v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
      out[i] = static_cast<int8_t>(v);
    }
  }
}

}  // namespace photon::cpu
