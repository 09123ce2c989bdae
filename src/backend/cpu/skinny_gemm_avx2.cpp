// The skinny kernels for AVX2 + FMA + F16C (x86-64 since 2013-2015). This file alone is compiled
// with -mavx2 -mfma -mf16c (src/CMakeLists.txt) and runs only where cpu_has_avx2() says so. It
// therefore includes no header with inline functions shared with other files: the linker keeps one
// copy of such a function, which could be this file's AVX2 build, called on any CPU.
#include <immintrin.h>

#include "backend/cpu/skinny_gemm_tiles.h"
#include "backend/cpu/skinny_gemm_x86.h"

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

struct Avx2 : X86Common {
  static constexpr int kLanes = 8;
  // 3 rows x 2 outputs x 2 partial-sum vectors and 2 weight vectors fill the 16 registers.
  static constexpr int kRows = 3, kOutputs = 2;
  // skinny_blocked's loops ran 15-30% slower at 12-32 rows on a Zen 5; on a Zen 3 (one thread,
  // f32 and bf16) at 33-47 rows about 7% faster with 256 columns and 3-15% slower with 1,664, at
  // 64 rows as fast or faster with both.
  static constexpr int kBlockedRows = 48;
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
  // A q8 block's scale in every lane, and 8 of its values times it: each d * q, exact.
  static Vec scale(const Q8Block* b) {
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(uint32_t{b->scale} << 16)));
  }
  static Vec load(const int8_t* q, Vec d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)))));
  }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  // Lanes l and l + 8 are the two vectors.
  static float sum(const Vec* parts) { return sum8(_mm256_add_ps(parts[0], parts[1])); }
};

template <class W>
void widen(const W* src, float* dst, long n) {
  long i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(src + i));
  for (; i < n; ++i) dst[i] = Avx2::scalar(src + i);
}

}  // namespace

const SkinnyKernels kSkinnyAvx2 = {skinny<Avx2, float>,   skinny<Avx2, Bf16>, skinny<Avx2, F16>,
                                   skinny<Avx2, Q8Block>, widen<Bf16>,        widen<F16>};

}  // namespace photon::cpu
