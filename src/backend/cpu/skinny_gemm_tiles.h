// The loops of skinny_gemm.h, written once over an instruction set's vector traits V:
//   V::kLanes                   floats per vector (16 / kLanes vectors hold the 16 partial sums)
//   V::Vec                      one vector
//   V::zero(), V::load(p)       p: const float*, const Bf16* or const F16* (widened to f32)
//   V::scale(b), V::load(q, d)  a q8 block b's scale in every lane; kLanes int8 values q times it
//   V::fma(a, b, c)             a * b + c per lane
//   V::sum(parts)               the 16 partial sums of parts[0 .. 16 / kLanes) by the fixed tree
//   V::scalar(p), V::fma1(a, b, c)   one element widened; one multiply-add
//   V::scalar(b, i)             value i of a q8 block
//   V::kRows, V::kOutputs       the tile: rows x outputs computed together (the register file's
//                               size sets it)
//   V::kBlockedRows             the fewest rows for skinny_blocked's loops (0: never)
// Each kernel file includes this with its own traits, in an anonymous namespace.
#pragma once

#include <algorithm>
#include <type_traits>

#include "backend/cpu/skinny_gemm.h"

namespace photon::cpu {
namespace {

// How the loops address a weight matrix of storage type W: row-major, `in` values a row, each an
// element of W, or for q8 in / 32 blocks.
template <class W>
constexpr bool kBlocks = std::is_same_v<W, Q8Block>;

template <class W>
inline const W* row_at(const W* w, long row, int in) {
  if constexpr (kBlocks<W>)
    return w + row * static_cast<long>(static_cast<unsigned>(in) / 32);
  else
    return w + row * in;
}
template <class W>
inline long row_bytes(int in) {
  const long elements = kBlocks<W> ? static_cast<long>(static_cast<unsigned>(in) / 32) : in;
  return elements * static_cast<long>(sizeof(W));
}
template <class V, class W>
inline float scalar_at(const W* row, int k) {
  if constexpr (kBlocks<W>)
    return V::scalar(row + static_cast<unsigned>(k) / 32, static_cast<unsigned>(k) % 32);
  else
    return V::scalar(row + k);
}
// Where column k of a row lies, to fetch it ahead.
template <class W>
inline const void* address_at(const W* row, long k) {
  if constexpr (kBlocks<W>)
    return reinterpret_cast<const char*>(row + static_cast<unsigned long>(k) / 32) + 2 +
           static_cast<unsigned long>(k) % 32;
  else
    return row + k;
}

// The loops of one tile of RB rows x WB outputs, over partial sums that the caller holds (in
// registers, once these are inlined): 16 / kLanes vectors per output. The loops over rows,
// outputs and vectors have constant bounds and are unrolled, so that no partial sum goes through
// memory: stored and reloaded around each tile's loop, they took 18% of an AVX2 3 x 2 tile's time
// at 256 columns, and products of 128 to 512 rows ran 10-16% slower (one thread on a Zen 3).
template <class V, class W, int RB, int WB>
struct Tile {
  static constexpr int P = 16 / V::kLanes;
  using Sums = typename V::Vec[RB][WB][P];

  static void zero(Sums& a) {
#pragma GCC unroll 32
    for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
      for (int j = 0; j < WB; ++j)
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) a[i][j][p] = V::zero();
  }
  static void copy(const Sums& from, Sums& to) {
#pragma GCC unroll 32
    for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
      for (int j = 0; j < WB; ++j)
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) to[i][j][p] = from[i][j][p];
  }

  // Columns [k0, k1) (whole groups of 16) into the partial sums. next: when not null, the weight
  // rows of the next outputs, which this tile fetches into the cache from column `fetch` on while
  // it computes, `spread` times slower than it walks its own (each of the `spread` tiles of a
  // block fetches its share): the hardware prefetcher alone leaves the multiply-adds waiting for
  // memory when several rows share each weight load.
  static void steps(Sums& a, const float* x, int in, const W* w, int k0, int k1, const W* next,
                    long fetch, int spread) {
    // k / spread as a multiplication by a fixed-point reciprocal (exact for every column count a
    // model can have): a division in the loop held one row of 16-bit weights to 40 GB/s of the
    // memory's 55 (vanilla-600m's matrices, 2 threads on a Zen 5).
    const unsigned long reciprocal = (1UL << 32) / static_cast<unsigned>(spread) + 1;
    // q8 goes a block (two groups of 16) at a time, its scales widened once per block.
    constexpr int kStep = kBlocks<W> ? 32 : 16;
    for (int k = k0; k < k1; k += kStep) {
      const unsigned long column = static_cast<unsigned>(k);
      if (next)
        for (int j = 0; j < WB; ++j)
          __builtin_prefetch(address_at(row_at(next, j, in),
                                        fetch + static_cast<long>((column * reciprocal) >> 32)));
      [[maybe_unused]] const W* block[WB];
      [[maybe_unused]] typename V::Vec scale[WB];
      if constexpr (kBlocks<W>)
#pragma GCC unroll 32
        for (int j = 0; j < WB; ++j) {
          block[j] = row_at(w, j, in) + column / 32;
          scale[j] = V::scale(block[j]);
        }
#pragma GCC unroll 32
      for (int g = 0; g < kStep; g += 16)
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) {
          const int at = k + g + p * V::kLanes;
          typename V::Vec wv[WB];
#pragma GCC unroll 32
          for (int j = 0; j < WB; ++j)
            if constexpr (kBlocks<W>)
              wv[j] = V::load(block[j]->q + g + p * V::kLanes, scale[j]);
            else
              wv[j] = V::load(w + static_cast<long>(j) * in + at);
#pragma GCC unroll 32
          for (int i = 0; i < RB; ++i) {
            const typename V::Vec xv = V::load(x + static_cast<long>(i) * in + at);
#pragma GCC unroll 32
            for (int j = 0; j < WB; ++j) a[i][j][p] = V::fma(xv, wv[j], a[i][j][p]);
          }
        }
    }
  }

  // The fixed tree, then the columns from `whole` on one at a time, into y.
  static void finish(const Sums& a, const float* x, int in, const W* w, int whole, float* y,
                     int ldy, bool accumulate) {
    float s[RB][WB];
#pragma GCC unroll 32
    for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
      for (int j = 0; j < WB; ++j) s[i][j] = V::sum(a[i][j]);
    if (whole < in)
      for (int i = 0; i < RB; ++i)
        for (int j = 0; j < WB; ++j)
          for (int k = whole; k < in; ++k)
            s[i][j] = V::fma1(x[static_cast<long>(i) * in + k], scalar_at<V>(row_at(w, j, in), k),
                              s[i][j]);
#pragma GCC unroll 32
    for (int i = 0; i < RB; ++i)
#pragma GCC unroll 32
      for (int j = 0; j < WB; ++j) {
        float& out = y[static_cast<long>(i) * ldy + j];
        out = accumulate ? out + s[i][j] : s[i][j];
      }
  }
};

template <class V, class W, int RB, int WB>
inline void skinny_tile(const float* x, int in, const W* w, float* y, int ldy, bool accumulate,
                        const W* next, long fetch, int spread) {
  using T = Tile<V, W, RB, WB>;
  const int whole = in - in % 16;
  typename T::Sums a;
  T::zero(a);
  T::steps(a, x, in, w, 0, whole, next, fetch, spread);
  T::finish(a, x, in, w, whole, y, ldy, accumulate);
}

// Rows [r, r + rows) against outputs [o, o + WB), for a rows < V::kRows known only at run time.
template <int R, class Tile>
inline void skinny_tail(int rows, int r, const Tile& tile) {
  if constexpr (R > 0) {
    if (rows == R)
      tile(std::integral_constant<int, R>{}, r);
    else
      skinny_tail<R - 1>(rows, r, tile);
  }
}

// All rows against outputs [o, o + WB): V::kRows rows at a time (their accumulators and WB weight
// vectors fill the register file), then the rest.
// The tiles fetch the next outputs' weights ahead (see Tile::steps), which pays at every row count
// and weight type.
template <class V, class W, int WB>
inline void skinny_outputs(const SkinnyArgs& a, const W* w, int o) {
  constexpr int RB = V::kRows;
  const W* wo = row_at(w, o, a.in);
  const W* next = o + 2 * WB <= a.o1 ? row_at(wo, WB, a.in) : nullptr;
  const int tiles = (a.n + RB - 1) / RB;
  auto tile = [&](auto rows, int r) {
    skinny_tile<V, W, decltype(rows)::value, WB>(
        a.x + static_cast<long>(r) * a.in, a.in, wo, a.y + static_cast<long>(r) * a.ldy + o, a.ldy,
        a.accumulate, next, static_cast<long>(r / RB) * a.in / tiles, tiles);
  };
  int r = 0;
  for (; r + RB <= a.n; r += RB) tile(std::integral_constant<int, RB>{}, r);
  skinny_tail<RB - 1>(a.n - r, r, tile);
}

template <class V, class W, int WB>
inline void skinny_range(const SkinnyArgs& a, const W* w) {
  int o = a.o0;
  for (; o + WB <= a.o1; o += WB) skinny_outputs<V, W, WB>(a, w, o);
  for (; o < a.o1; ++o) skinny_outputs<V, W, 1>(a, w, o);
}

// Many rows (at least V::kBlockedRows): each tile of V::kRows rows in turn against every group of
// outputs of a block, kColumns columns at a time, so that the tile's activations stay in the
// first-level cache for all the groups; the loops above read them again from the second level for
// each group, which leaves the multiply-adds waiting (a quarter of the time at 128 rows). The
// partial sums wait in `saved` between blocks of columns, unchanged, so the order of the
// arithmetic is skinny_gemm.h's. The block's weights (at most kBlockBytes) stay in the second
// level for all the tiles; the first tile fetches the next group's ahead, as skinny_outputs does.
// Rows past the last whole tile, and outputs past the last whole group, take the loops above.
template <class V, class W>
inline void skinny_blocked(const SkinnyArgs& a, const W* w) {
  constexpr int RB = V::kRows, WB = V::kOutputs;
  constexpr int kColumns = 1024, kMaxOutputs = 64;
  constexpr long kBlockBytes = 512 << 10;
  using T = Tile<V, W, RB, WB>;
  typename T::Sums saved[kMaxOutputs / WB];
  const long in = a.in;
  const int whole = a.in - a.in % 16;
  const int rows = a.n - a.n % RB;
  const int fit = static_cast<int>(kBlockBytes / row_bytes<W>(a.in));
  const int block = std::clamp(fit - fit % WB, WB, kMaxOutputs);
  for (int ob = a.o0; ob < a.o1; ob += block) {
    const int oe = std::min(a.o1, ob + block);
    const int groups = (oe - ob) / WB;
    for (int r = 0; r < rows; r += RB) {
      const float* x = a.x + r * in;
      float* y = a.y + static_cast<long>(r) * a.ldy + ob;
      for (int k0 = 0; k0 < whole; k0 += kColumns) {
        const int k1 = std::min(whole, k0 + kColumns);
        for (int g = 0; g < groups; ++g) {
          const W* wg = row_at(w, ob + g * WB, a.in);
          typename T::Sums t;
          if (k0 == 0)
            T::zero(t);
          else
            T::copy(saved[g], t);
          T::steps(t, x, a.in, wg, k0, k1,
                   r == 0 && g + 1 < groups ? row_at(wg, WB, a.in) : nullptr, 0, 1);
          if (k1 < whole)
            T::copy(t, saved[g]);
          else
            T::finish(t, x, a.in, wg, whole, y + g * WB, a.ldy, a.accumulate);
        }
      }
    }
    SkinnyArgs rest = a;
    rest.x = a.x + rows * in;
    rest.n = a.n - rows;
    rest.y = a.y + static_cast<long>(rows) * a.ldy;
    for (int g = 0; g < groups; ++g) skinny_outputs<V, W, WB>(rest, w, ob + g * WB);
    for (int o = ob + groups * WB; o < oe; ++o) skinny_outputs<V, W, 1>(a, w, o);
  }
}

template <class V, class W>
void skinny(const SkinnyArgs& a) {
  const W* w = static_cast<const W*>(a.w);
  // One row (a single session decoding) reads each weight once, so memory bounds it: one output at
  // a time, one weight stream per thread with the next row fetched ahead, ran 13-20% faster than 2,
  // 4 or 8 outputs' streams with every vector set and weight type (vanilla-600m's matrices, 2
  // threads on a Zen 5; docs/performance.md, "CPU kernels and threads").
  if (a.n == 1) return skinny_range<V, W, 1>(a, w);
  if constexpr (V::kBlockedRows > 0)
    if (a.n >= V::kBlockedRows && a.in >= 16) return skinny_blocked<V, W>(a, w);
  skinny_range<V, W, V::kOutputs>(a, w);
}

}  // namespace
}  // namespace photon::cpu
