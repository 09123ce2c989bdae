// What the AVX2 and AVX-512 kernels share: the end of the fixed reduction tree and the columns
// after the last whole group of 16, one element at a time; the traits of attention's loops over 8
// f32 lanes; and, in the files compiled for AVX-512, the traits of the kernels over 16 f32 lanes.
// Internal linkage (an anonymous namespace), so that each kernel file keeps its own copy built for
// its own instruction set (see skinny_gemm_avx2.cpp).
#pragma once

#include <immintrin.h>

#include "backend/cpu/skinny_gemm.h"

namespace photon::cpu {
namespace {

struct X86Common {
  // s8 holds s[l] + s[l + 8]: then the 128-bit halves (+ 4), + 2, + 1.
  static float sum8(__m256 s8) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static float scalar(const float* p) { return *p; }
  // bf16 is the upper half of an f32.
  static float scalar(const Bf16* p) {
    return _mm_cvtss_f32(_mm_castsi128_ps(
        _mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(p->bits) << 16))));
  }
  static float scalar(const F16* p) { return _cvtsh_ss(p->bits); }
  static float scalar(const Q8Block* b, int i) {
    return scalar(reinterpret_cast<const Bf16*>(&b->scale)) * static_cast<float>(b->q[i]);
  }
  static float fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
  }
};

// bf16 is the upper half of an f32: widen to 32 bits and shift.
inline __m256 widen8(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 widen8(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The traits of attention's loops (attention_rows_loops.h): the AVX2 and AVX-512 sets run the same
// 256-bit code, each built for its own instruction set.
struct X86Rows : X86Common {
  using Vec = __m256;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec broadcast(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load(const Bf16* p) { return widen8(p); }
  static Vec load(const F16* p) { return widen8(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
};

#if defined(__AVX512F__)
// What the AVX-512 kernels over f32 lanes share (skinny_gemm_avx512.cpp, and the bf16 dot
// products of skinny_bf16_avx512bf16.cpp): the tile, the f32 rows' loads and the sum of the 16
// lanes. Each adds its weights' loads and its multiply-add.
struct X86Avx512 : X86Common {
  static constexpr int kLanes = 16;
  // 6 rows x 4 outputs of accumulators, 4 weight vectors and one activation vector take 29 of the
  // 32 registers, and 24 multiply-adds need 10 loads.
  static constexpr int kRows = 6, kOutputs = 4;
  // From 48 rows (8 tiles) skinny_blocked's loops ran 20-27% faster at 48-256 rows; at 32-40
  // rows, 0-10% slower (f32, 1,664 and 4,096 columns, 2 threads on a Zen 5).
  static constexpr int kBlockedRows = 48;
  using Vec = __m512;

  static Vec zero() { return _mm512_setzero_ps(); }
  // As in the AVX2 kernels: keep the loaded vector in a register rather than folding it into each
  // multiply-add as a memory operand.
  static Vec load(const float* p) {
    Vec v = _mm512_loadu_ps(p);
    __asm__("" : "+v"(v));
    return v;
  }
  // Lanes l and l + 8 are the two 256-bit halves. The zero-masked extraction, because GCC 12 warns
  // that the unmasked one reads an uninitialized vector (GCC bug 105593); the all-ones mask
  // compiles away.
  static float sum(const Vec* parts) {
    const __m512d d = _mm512_castps_pd(parts[0]);
    return sum8(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0)),
                              _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1))));
  }
};
#endif

}  // namespace
}  // namespace photon::cpu
