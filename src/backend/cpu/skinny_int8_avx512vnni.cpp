// The q8_int8 kernel (skinny_gemm.h) for AVX512-VNNI with AVX512-VL (Intel since 2019, AMD since
// 2022): vpdpbusd adds the four byte products of each 32-bit lane in one instruction, where AVX2
// needs two (vpmaddubsw, vpmaddwd) and a sign transfer. This file alone is compiled with those
// extensions (src/CMakeLists.txt) and runs only where cpu_has_avx512_vnni() says so; like the other
// kernel files it includes no header with inline functions shared with other files.
//
// The eight lane sums of one output in the kernel's fixed order fill 256 bits, one q8 block.
// Several rows set two outputs side by side in each 512-bit vector, which halves the instructions
// and leaves every lane's arithmetic as it was, so the bits are those of every other set.
// AVX-512VL lends the 32 vector registers to the 256-bit traits of the outputs left over.
#include <immintrin.h>

#include "backend/cpu/skinny_gemm_x86.h"
#include "backend/cpu/skinny_int8_tiles.h"

namespace photon::cpu {

namespace {

// vpdpbusd multiplies unsigned by signed bytes. The activations enter offset by 128 (q + 128, in
// [1, 255]) and the weights as they are; each lane's sum starts at -128 x (the sum of its four
// weights), so that it ends as the exact integer sum of the four products, which fits 32 bits with
// room to spare. The offset is taken once per activation block and the start once per weight block,
// leaving one integer instruction per row and output.
//
// One output: 256-bit vectors, one q8 block per vector (the eight lane sums are one vector).
struct Vnni256 {
  static constexpr int kRows = 8, kPack = 1;
  using Single = Vnni256;
  using Acc = __m256;
  struct Weight {
    __m256i q, start;
    __m256 d;
  };
  struct Act {
    __m256i offset_q;
    __m256 d;
  };
  static Acc zero() { return _mm256_setzero_ps(); }
  static __m256i offset() { return _mm256_set1_epi8(static_cast<char>(0x80)); }
  static __m256 scale(const Q8Block* b) {
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(uint32_t{b->scale} << 16)));
  }
  static __m256i q(const Q8Block* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->q));
  }
  static Weight weight(const Q8Block* b, long) {
    const __m256i sum128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset(), q(b));
    return {q(b), _mm256_sub_epi32(_mm256_setzero_si256(), sum128), scale(b)};
  }
  static Act act(const int8_t* q, const float* d) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return {_mm256_xor_si256(v, offset()), _mm256_broadcast_ss(d)};
  }
  static void step(Acc& acc, const Act& x, const Weight& w) {
    const __m256i quads = _mm256_dpbusd_epi32(w.start, x.offset_q, w.q);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), _mm256_mul_ps(x.d, w.d), acc);
  }
  static float sum(Acc acc, int) { return X86Common::sum8(acc); }
};

// Several rows: two outputs per 512-bit vector, lanes 0-7 the first output's, 8-15 the second's,
// each activation block broadcast to both halves. Every lane does what Vnni256's does, so the bits
// are the same, from half the instructions. 8 rows x 4 outputs: 16 vectors of sums, and per pair
// of outputs q, the start and the scales. One thread on a Zen 5, 8 to 512 rows against 1,536 x
// 1,536 and 1,536 x 4,096 weights, best of 20: 104-119 GMAC/s, where 256-bit vectors (8 x 2) gave
// 66-69; 10 x 4 108-118, 4 x 6 107-109, 6 x 4 97-101, 8 x 2 87-92.
struct Vnni512 {
  static constexpr int kRows = 8, kOutputs = 4, kPack = 2;
  using Single = Vnni256;
  using Acc = __m512;
  struct Weight {
    __m512i q, start;
    __m512 d;
  };
  struct Act {
    __m512i offset_q;
    __m512 d;
  };
  // Every lane: the zero-masked forms of the intrinsics below, because GCC 12 warns that the
  // unmasked ones read an uninitialized vector (GCC bug 105593); the all-ones mask compiles away.
  static constexpr __mmask8 kAll8 = 0xFF;
  static constexpr __mmask16 kAll16 = 0xFFFF;
  // Two 256-bit halves as one vector, a in the low half.
  static __m512i join(__m256i a, __m256i b) {
    return _mm512_maskz_inserti64x4(kAll8, _mm512_castsi256_si512(a), b, 1);
  }
  static Acc zero() { return _mm512_setzero_ps(); }
  static Weight weight(const Q8Block* b, long stride) {
    const __m512i q = join(Vnni256::q(b), Vnni256::q(b + stride));
    const __m512i sum128 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), q);
    const __m512i d = join(_mm256_castps_si256(Vnni256::scale(b)),
                           _mm256_castps_si256(Vnni256::scale(b + stride)));
    return {q, _mm512_sub_epi32(_mm512_setzero_si512(), sum128), _mm512_castsi512_ps(d)};
  }
  static Act act(const int8_t* q, const float* d) {
    const Vnni256::Act x = Vnni256::act(q, d);
    return {_mm512_maskz_broadcast_i64x4(kAll8, x.offset_q), _mm512_set1_ps(*d)};
  }
  static void step(Acc& acc, const Act& x, const Weight& w) {
    const __m512i quads = _mm512_dpbusd_epi32(w.start, x.offset_q, w.q);
    acc = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll16, quads), _mm512_mul_ps(x.d, w.d), acc);
  }
  static float sum(Acc acc, int k) {
    const __m512d d = _mm512_castps_pd(acc);
    return X86Common::sum8(_mm256_castpd_ps(k == 0 ? _mm512_maskz_extractf64x4_pd(kAll8, d, 0)
                                                   : _mm512_maskz_extractf64x4_pd(kAll8, d, 1)));
  }
};

}  // namespace

void skinny_q8_int8_avx512vnni(const SkinnyArgs& a) {
  skinny_int8<Vnni512>(a);
}

}  // namespace photon::cpu
