// The q8_int8 kernel (skinny_gemm.h) for AVX512-VNNI with AVX512-VL (Intel since 2019, AMD since
// 2022): vpdpbusd adds the four byte products of each 32-bit lane in one instruction, where AVX2
// needs two (vpmaddubsw, vpmaddwd) and a sign transfer. This file alone is compiled with those
// extensions (src/CMakeLists.txt) and runs only where cpu_has_avx512_vnni() says so; like the other
// kernel files it includes no header with inline functions shared with other files.
//
// The vectors stay 256 bits wide, one q8 block per vector: the eight lane sums of the kernel's
// fixed order are one vector, so the bits are those of every other set. AVX-512VL lends the 32
// vector registers to the bigger tile.
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
struct Avx512VnniInt8 {
  // 8 rows x 2 outputs of sums, and per output q, the start and the scale: 2-5% faster than 4 x 4,
  // 6 x 3, 8 x 3 or 3 x 4 at 8 to 128 rows, and as fast as 10 x 2 or 12 x 2 (a 2,048 x 512 matrix,
  // one thread on a Zen 5: 67-70 GMAC/s, where the AVX2 kernel gives 53-54).
  static constexpr int kRows = 8, kOutputs = 2;
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
  static Weight weight(const Q8Block* b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->q));
    const __m256i sum128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset(), q);
    const __m256 d =
        _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(uint32_t{b->scale} << 16)));
    return {q, _mm256_sub_epi32(_mm256_setzero_si256(), sum128), d};
  }
  static Act act(const int8_t* q, const float* d) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return {_mm256_xor_si256(v, offset()), _mm256_broadcast_ss(d)};
  }
  static void step(Acc& acc, const Act& x, const Weight& w) {
    const __m256i quads = _mm256_dpbusd_epi32(w.start, x.offset_q, w.q);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), _mm256_mul_ps(x.d, w.d), acc);
  }
  static float sum(Acc acc) { return X86Common::sum8(acc); }
};

}  // namespace

void skinny_q8_int8_avx512vnni(const SkinnyArgs& a) {
  skinny_int8<Avx512VnniInt8>(a);
}

}  // namespace photon::cpu
