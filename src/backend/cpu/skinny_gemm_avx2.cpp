// The skinny kernels for AVX2 + FMA + F16C (x86-64 since 2013-2015). This file alone is compiled
// with -mavx2 -mfma -mf16c (src/CMakeLists.txt) and runs only where cpu_has_avx2() says so. It
// therefore includes no header with inline functions shared with other files: the linker keeps one
// copy of such a function, which could be this file's AVX2 build, called on any CPU.
#include <immintrin.h>

#include "backend/cpu/skinny_gemm_tiles.h"

namespace photon::cpu {

namespace {

// bf16 is the upper half of an f32: widen to 32 bits and shift.
inline __m256 widen8(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 widen8(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

struct Avx2 {
  static constexpr int kLanes = 8;
  using Vec = __m256;

  static Vec zero() { return _mm256_setzero_ps(); }
  // The empty asm keeps the vector in a register: folded into each multiply-add as a memory operand
  // it would be loaded once per use, and loads, not multiply-adds, would bound the loop.
  static Vec load(const float* p) {
    Vec v = _mm256_loadu_ps(p);
    __asm__("" : "+x"(v));
    return v;
  }
  static Vec load(const Bf16* p) { return widen8(p); }
  static Vec load(const F16* p) { return widen8(p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  // Lanes l and l + 8 are the two vectors; then the 128-bit halves (+ 4), + 2, + 1.
  static float sum(const Vec* parts) {
    const __m256 s8 = _mm256_add_ps(parts[0], parts[1]);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static float scalar(const float* p) { return *p; }
  static float scalar(const Bf16* p) {
    return _mm_cvtss_f32(_mm_castsi128_ps(
        _mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(p->bits) << 16))));
  }
  static float scalar(const F16* p) { return _cvtsh_ss(p->bits); }
  static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
  }
};

template <class W>
void widen(const W* src, float* dst, long n) {
  long i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(src + i));
  for (; i < n; ++i) dst[i] = Avx2::scalar(src + i);
}

}  // namespace

const SkinnyKernels kSkinnyAvx2 = {skinny<Avx2, float>, skinny<Avx2, Bf16>, skinny<Avx2, F16>,
                                   widen<Bf16>, widen<F16>};

}  // namespace photon::cpu
