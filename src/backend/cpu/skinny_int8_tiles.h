// The loops of the q8_int8 kernel (skinny_gemm.h), written once over an instruction set's traits V:
//   V::kPack                    outputs side by side in one vector of sums (eight lanes each)
//   V::Acc, V::zero()           the eight lane sums of one row and kPack outputs
//   V::Weight, V::weight(b, s)  q8 block b and the blocks s, 2 s, ... after it (the same block of
//                               the next kPack - 1 outputs) as the dot products take them
//   V::Act, V::act(q, d)        a block of 32 int8 activations q and its scale *d
//   V::step(acc, x, w)          acc[m] = fma(sum of x.q w.q over lane m's 4 columns, x.d w.d,
//                               acc[m]), for each output's lanes
//   V::sum(acc, k)              output k's (a[m] + a[m + 4]), + 2, + 1
//   V::kRows, V::kOutputs       the tile of rows x outputs computed together (kOutputs a multiple
//                               of kPack)
//   V::Single                   the traits of one output per vector (kPack 1), for the outputs
//                               left over: their kRows rows at a time
// Each kernel file includes this with its own traits, in an anonymous namespace.
#pragma once

#include "backend/cpu/skinny_gemm_tiles.h"

namespace photon::cpu {
namespace {

// Rows [r, r + RB) against outputs [o, o + WB). next: when not null, the weight rows of the next
// outputs, fetched into the cache a block at a time while this tile computes.
template <class V, int RB, int WB>
inline void int8_tile(const SkinnyArgs& a, int r, int o, const Q8Block* next) {
  constexpr int P = V::kPack, G = WB / P;
  static_assert(WB % P == 0, "a tile holds whole vectors of outputs");
  const long blocks = a.in / 32;
  const Q8Block* w = static_cast<const Q8Block*>(a.w) + o * blocks;
  const int8_t* xq = a.xq + static_cast<long>(r) * a.in;
  const float* xd = a.xd + r * blocks;
  typename V::Acc acc[RB][G];
#pragma GCC unroll 32
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
    for (int g = 0; g < G; ++g) acc[i][g] = V::zero();
  for (long b = 0; b < blocks; ++b) {
    if (next)
      for (int j = 0; j < WB; ++j) __builtin_prefetch(next + j * blocks + b);
    typename V::Weight wt[G];
#pragma GCC unroll 32
    for (int g = 0; g < G; ++g) wt[g] = V::weight(w + g * P * blocks + b, blocks);
#pragma GCC unroll 32
    for (int i = 0; i < RB; ++i) {
      const typename V::Act x = V::act(xq + i * a.in + 32 * b, xd + i * blocks + b);
#pragma GCC unroll 32
      for (int g = 0; g < G; ++g) V::step(acc[i][g], x, wt[g]);
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < WB; ++j) {
      float& out = a.y[static_cast<long>(r + i) * a.ldy + o + j];
      const float s = V::sum(acc[i][j / P], j % P);
      out = a.accumulate ? out + s : s;
    }
}

// All rows against outputs [o, o + WB): V::kRows rows at a time, then the rest. The first tile
// fetches the next outputs' weights; the later ones find them in the cache.
template <class V, int WB>
inline void int8_outputs(const SkinnyArgs& a, int o) {
  constexpr int RB = V::kRows;
  const Q8Block* next =
      o + 2 * WB <= a.o1 ? static_cast<const Q8Block*>(a.w) + (o + WB) * (a.in / 32L) : nullptr;
  auto tile = [&](auto rows, int r) {
    int8_tile<V, decltype(rows)::value, WB>(a, r, o, r == 0 ? next : nullptr);
  };
  int r = 0;
  for (; r + RB <= a.n; r += RB) tile(std::integral_constant<int, RB>{}, r);
  skinny_tail<RB - 1>(a.n - r, r, tile);
}

template <class V>
void skinny_int8(const SkinnyArgs& a) {
  // One row reads each weight once: one output at a time, as skinny() does for the same reason.
  constexpr int WB = V::kOutputs;
  int o = a.o0;
  if (a.n > 1)
    for (; o + WB <= a.o1; o += WB) int8_outputs<V, WB>(a, o);
  for (; o < a.o1; ++o) int8_outputs<typename V::Single, 1>(a, o);
}

}  // namespace
}  // namespace photon::cpu
