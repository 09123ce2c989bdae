// The bf16-precision products with bf16 weights for AVX512-BF16 (Intel since 2020, AMD since 2022):
// vdpbf16ps multiplies 32 pairs of bf16 values and adds each pair to one of 16 f32 lanes, twice the
// multiply-adds of an f32 multiply-add per instruction, with no widening of the weights. This file
// alone is compiled with AVX512-BF16 (src/CMakeLists.txt) and runs only where
// cpu_has_fast_bf16_dot() says so (the tests run it wherever the processor has AVX512-BF16); like
// the other kernel files it includes no header with inline functions shared with other files.
//
// The loops are skinny_gemm_tiles.h's, over pairs of columns: a row of `in` bf16 values is read as
// in / 2 32-bit pairs, so that partial sum l takes the pairs 16 i + l (columns 32 i + 2 l and + 1),
// the tree adds them as skinny_gemm.h says, and a pair past the last whole group of 16 adds its
// two products one at a time. The order is fixed, so a row's bits do not depend on its
// neighbours, but it is not the f32 kernels' order, and vdpbf16ps treats subnormal inputs and
// results as zero: the bits differ from the other sets' within f32 rounding (skinny_gemm.h).
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "backend/cpu/skinny_gemm_tiles.h"
#include "backend/cpu/skinny_gemm_x86.h"

namespace photon::cpu {

namespace {

// Two bf16 values of a row, the first in the low half.
struct Bf16Pair {
  uint32_t bits;
};

// The tile and the activations' loads of the AVX-512 f32 kernels: the activations' pairs are passed
// to the loops as the f32 rows they take.
struct Avx512Bf16Dot : X86Avx512 {
  using X86Avx512::load;
  static Vec load(const Bf16Pair* p) { return _mm512_loadu_ps(p); }
  static Vec fma(Vec x, Vec w, Vec acc) {
    return _mm512_dpbf16_ps(acc, std::bit_cast<__m512bh>(x), std::bit_cast<__m512bh>(w));
  }
  // A pair as the bits of one float, and its two products added as vdpbf16ps adds them: the
  // second's first, each product exact in f32.
  using X86Avx512::scalar;
  static float scalar(const Bf16Pair* p) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  static float widen(uint32_t bits) {
    const uint32_t wide = bits << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
  }
  static float fma1(float x, float w, float acc) {
    uint32_t xb, wb;
    std::memcpy(&xb, &x, sizeof xb);
    std::memcpy(&wb, &w, sizeof wb);
    acc = X86Common::fma1(widen(xb >> 16), widen(wb >> 16), acc);
    return X86Common::fma1(widen(xb & 0xFFFF), widen(wb & 0xFFFF), acc);
  }
};

}  // namespace

void skinny_bf16_dot_avx512bf16(const SkinnyArgs& a) {
  SkinnyArgs pairs = a;
  pairs.x = reinterpret_cast<const float*>(a.xb);
  pairs.in = a.in / 2;
  skinny<Avx512Bf16Dot, Bf16Pair>(pairs);
}

}  // namespace photon::cpu
