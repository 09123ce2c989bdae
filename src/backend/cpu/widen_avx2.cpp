// The F16C half of widen.h. This file alone is compiled with -mavx2 -mfma -mf16c
// (src/CMakeLists.txt) and runs only where cpu_has_avx2() says so.
#include <immintrin.h>

#include "backend/cpu/widen.h"

namespace photon::cpu {

void widen_f16_avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace photon::cpu
