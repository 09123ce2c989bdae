// The skinny kernels for AVX2 + FMA + F16C (x86-64 since 2013-2015). This file alone is compiled
// with -mavx2 -mfma -mf16c (src/CMakeLists.txt) and runs only where cpu_has_avx2() says so. It
// therefore includes no header with inline functions shared with other files: the linker keeps one
// copy of such a function, which could be this file's AVX2 build, called on any CPU.
#include <immintrin.h>

#include "backend/cpu/attention_rows_loops.h"
#include "backend/cpu/skinny_gemm_tiles.h"
#include "backend/cpu/skinny_gemm_x86.h"
#include "backend/cpu/skinny_int8_tiles.h"

namespace photon::cpu {

namespace {

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

// The q8_int8 kernel (skinny_int8_tiles.h). vpmaddubsw multiplies unsigned by signed bytes: the
// weights enter as |q| and the activations carry the weights' signs. Its pairs of products, at
// most 2 x 127 x 128, fit its 16-bit sums without saturating, even for a weight of -128.
struct Avx2Int8 {
  // 4 rows x 2 outputs of sums, and per output |q|, q and the scale: 3-4% faster than 3 x 2, 2 x 4
  // or 5 x 2 at 8 and 32 rows (a 2,048 x 2,048 matrix, one thread on a Zen 3).
  static constexpr int kRows = 4, kOutputs = 2, kPack = 1;
  using Single = Avx2Int8;
  using Acc = __m256;
  struct Weight {
    __m256i magnitude, sign;
    __m256 d;
  };
  struct Act {
    __m256i q;
    __m256 d;
  };
  static Acc zero() { return _mm256_setzero_ps(); }
  static Weight weight(const Q8Block* b, long) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->q));
    return {_mm256_abs_epi8(q), q, Avx2::scale(b)};
  }
  static Act act(const int8_t* q, const float* d) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), _mm256_broadcast_ss(d)};
  }
  static void step(Acc& acc, const Act& x, const Weight& w) {
    const __m256i pairs = _mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x.q, w.sign));
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), _mm256_mul_ps(x.d, w.d), acc);
  }
  static float sum(Acc acc, int) { return X86Common::sum8(acc); }
};

}  // namespace

const SkinnyKernels kSkinnyAvx2 = {skinny<Avx2, float>,
                                   skinny<Avx2, Bf16>,
                                   skinny<Avx2, F16>,
                                   skinny<Avx2, Q8Block>,
                                   skinny_int8<Avx2Int8>,
                                   skinny<Avx2, Bf16>,
                                   attention_loops<X86Rows, float>(),
                                   attention_loops<X86Rows, Bf16>(),
                                   attention_loops<X86Rows, F16>()};

}  // namespace photon::cpu
