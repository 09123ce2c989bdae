#include "backend/cpu/quantize_int8.h"

#include <cmath>
#include <limits>

namespace photon::cpu {

void quantize_int8(const float* x, long n, int in, int8_t* q, float* d) {
  const long values = n * in;
  for (long b = 0; b < values; b += 32) {
    const float* block = x + b;
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(block[i]);
      amax = std::fmax(amax, std::fabs(block[i]));
    }
    const float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    d[b / 32] = scale;
    for (int i = 0; i < 32; ++i) {
      // 1.5 x 2^23 added and taken away rounds |v| <= 2^22 to an integer, ties to even.
      const float v = finite && scale > 0 ? block[i] / scale : 0.0f;
      const float rounded = (v + 0x1.8p23f) - 0x1.8p23f;
      q[b + i] = static_cast<int8_t>(std::fmin(std::fmax(rounded, -127.0f), 127.0f));
    }
  }
}

}  // namespace photon::cpu
