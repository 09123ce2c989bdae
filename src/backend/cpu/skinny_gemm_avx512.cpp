// The skinny kernels for AVX-512F (x86-64 since 2017 for Intel, 2022 for AMD). This file alone is
// compiled with -mavx512f -mfma -mf16c (src/CMakeLists.txt) and runs only where cpu_has_avx512()
// says so; like skinny_gemm_avx2.cpp it includes no header with inline functions shared with
// other files.
//
// One 16-lane vector holds the 16 partial sums of skinny_gemm.h, and its reduction adds lanes l and
// l + 8 first, as the AVX2 kernels add their two vectors: both give the same bits. 16-bit weights
// are widened exactly and multiplied in f32. AVX512-BF16's dot product, which rounds the
// activations to bf16 as well, serves bf16 precision only (skinny_bf16_avx512bf16.cpp).
#include <immintrin.h>

#include <type_traits>

#include "backend/cpu/attention_rows_loops.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/skinny_gemm_tiles.h"
#include "backend/cpu/skinny_gemm_x86.h"

namespace photon::cpu {

namespace {

// Every lane: the zero-masked forms of the intrinsics below, because GCC 12 warns that the unmasked
// ones read an uninitialized vector (GCC bug 105593); the all-ones mask compiles away.
constexpr __mmask16 kAll16 = 0xFFFF;

// bf16 is the upper half of an f32: widen to 32 bits and shift.
inline __m512 widen16(const Bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll16, _mm512_maskz_cvtepu16_epi32(kAll16, h), 16));
}

inline __m512 widen16(const F16* p) {
  return _mm512_maskz_cvtph_ps(kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

struct Avx512 : X86Avx512 {
  using X86Avx512::load;
  static Vec load(const Bf16* p) { return widen16(p); }
  static Vec load(const F16* p) { return widen16(p); }
  // A q8 block's scale in every lane, and 16 of its values times it: each d * q, exact.
  static Vec scale(const Q8Block* b) {
    return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(uint32_t{b->scale} << 16)));
  }
  static Vec load(const int8_t* q, Vec d) {
    return _mm512_maskz_mul_ps(
        kAll16, d,
        _mm512_maskz_cvtepi32_ps(
            kAll16, _mm512_maskz_cvtepi8_epi32(
                        kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)))));
  }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
};

// Below these row counts the AVX2 kernels (3 x 2 tiles) run the products. With 16-bit weights
// they were 6-10% faster at 2-4 rows, and these 10% (5 rows) to 88% (15 rows) faster from 5 on:
// a 6 x 4 tile widens each weight vector once for 6 rows, the AVX2 tiles for every 3
// (vanilla-600m's matrices, 2 threads on a Zen 5, alternating builds; vanilla-600m bf16 at 8
// sessions decoded 128 -> 170 tok/s). With f32 weights the AVX2 kernels were 8-14% faster at 5-7
// rows, and at 8 rows these were 5% faster on the matrices alone but 10% slower in the engine, so
// f32 keeps them up to 15 rows. The bits are the same either way.
template <class W>
constexpr int kMinWideRows = std::is_same_v<W, float> ? 16 : 5;

template <class W, SkinnyKernel SkinnyKernels::*kAvx2>
void skinny_avx512(const SkinnyArgs& a) {
  if (a.n > 1 && a.n < kMinWideRows<W>)
    (kSkinnyAvx2.*kAvx2)(a);
  else
    skinny<Avx512, W>(a);
}

// AVX-512F has no byte multiplies (they are AVX512-BW's and VNNI's): int8 products of several rows
// run the VNNI kernel where the processor has it, else the AVX2 kernel; every set gives the same
// bits. One row runs the AVX2 kernel everywhere: on a Zen 5 it gave 26.8-31.7 GMAC/s where the
// VNNI kernel, whose weight blocks each cost a vpdpbusd of their own, gave 24.1-28.3 (one thread,
// one row against 4,096 x 1,664, 1,664 x 4,096 and 32,000 x 1,664 q8 weights, best of 300).
void q8_int8(const SkinnyArgs& a) {
  static const SkinnyKernel several =
      cpu_has_avx512_vnni() ? skinny_q8_int8_avx512vnni : kSkinnyAvx2.q8_int8;
  (a.n == 1 ? kSkinnyAvx2.q8_int8 : several)(a);
}

// bf16 precision with bf16 weights: vdpbf16ps where the processor runs it fast (cpu_features.h)
// and the rows are whole pairs of bf16 values (every model's are), else the bf16 kernel on the
// input rounded in f32. Never by row count: a row's bits must not depend on its neighbours.
void bf16_dot(const SkinnyArgs& a) {
  static const bool dot = cpu_has_fast_bf16_dot();
  if (dot && a.xb && a.in % 2 == 0)
    skinny_bf16_dot_avx512bf16(a);
  else
    skinny_avx512<Bf16, &SkinnyKernels::bf16>(a);
}

}  // namespace

const SkinnyKernels kSkinnyAvx512 = {skinny_avx512<float, &SkinnyKernels::f32>,
                                     skinny_avx512<Bf16, &SkinnyKernels::bf16>,
                                     skinny_avx512<F16, &SkinnyKernels::f16>,
                                     skinny_avx512<Q8Block, &SkinnyKernels::q8>,
                                     q8_int8,
                                     bf16_dot,
                                     attention_loops<X86Rows, float>(),
                                     attention_loops<X86Rows, Bf16>(),
                                     attention_loops<X86Rows, F16>()};

}  // namespace photon::cpu
