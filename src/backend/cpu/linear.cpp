#include "backend/cpu/linear.h"

#include <array>

#include "backend/cpu/parallel.h"
#include "backend/cpu/skinny_gemm.h"

namespace photon::cpu {

namespace {

// Below this many multiply-adds per thread, waking another thread costs more than it saves.
constexpr long kMinMacsPerThread = 1L << 18;
// Outputs per work item of the skinny kernels (a few per thread, handed out dynamically).
constexpr long kSkinnyChunk = 64;
// One row streams each weight once from memory, and there longer runs of rows per thread pay:
// a quarter of each thread's share per item ran 4-13% faster than 64 outputs (vanilla-600m's
// matrices, 2 threads on a Zen 5; docs/performance.md, "CPU kernels and threads"), still leaving
// the items to whichever thread is free.
constexpr long kOneRowChunksPerThread = 4;

long ceil_div(long a, long b) {
  return (a + b - 1) / b;
}
long round_up(long a, long multiple) {
  return ceil_div(a, multiple) * multiple;
}

SkinnyKernel skinny_kernel(const SkinnyKernels& k, DType dtype, const ProductInput& x) {
  switch (dtype) {
    case DType::F32: return k.f32;
    case DType::BF16: return x.xb ? k.bf16_dot : k.bf16;
    case DType::F16: return k.f16;
    case DType::Q8: return x.q ? k.q8_int8 : k.q8;
  }
  return k.f32;
}

// The skinny kernels over the outputs of every product in one parallel region, so that a thread
// done with one matrix goes on to the next instead of waiting at the end of each.
void skinny_products(const ProductInput& x, int n, std::span<const Product> products,
                     const SkinnyKernels& skinny, int threads) {
  // Groups are small (Q, K, V at most): longer ones go a few products at a time, so that the item
  // tables below live on the stack instead of the heap at every call.
  constexpr size_t kMaxGroup = 4;
  if (products.size() > kMaxGroup) {
    skinny_products(x, n, products.first(kMaxGroup), skinny, threads);
    return skinny_products(x, n, products.subspan(kMaxGroup), skinny, threads);
  }
  long macs = 0;
  for (const Product& p : products) macs += static_cast<long>(n) * p.w.out * p.w.in;
  const int wanted = threads_for(macs, kMinMacsPerThread, threads);
  // Per product: outputs per work item, and the index of its first item (first[size] = all).
  std::array<long, kMaxGroup> chunk{};
  std::array<long, kMaxGroup + 1> first{};
  for (size_t i = 0; i < products.size(); ++i) {
    const long out = products[i].w.out;
    chunk[i] = n == 1 ? std::max(kSkinnyChunk,
                                 round_up(ceil_div(out, kOneRowChunksPerThread * wanted), 16))
                      : kSkinnyChunk;
    first[i + 1] = first[i] + ceil_div(out, chunk[i]);
  }
  const long items = first[products.size()];
  parallel_for(std::min<long>(wanted, items), items, [&](long item, int) {
    size_t i = 0;
    while (item >= first[i + 1]) ++i;
    const Product& p = products[i];
    const long c = item - first[i];
    const SkinnyArgs args{x.x,
                          n,
                          p.w.in,
                          p.w.data,
                          static_cast<int>(c * chunk[i]),
                          static_cast<int>(std::min<long>(p.w.out, (c + 1) * chunk[i])),
                          p.y,
                          p.w.out,
                          p.accumulate,
                          x.q,
                          x.d,
                          x.xb};
    skinny_kernel(skinny, p.w.dtype, x)(args);
  });
}

}  // namespace

void linear(const ProductInput& x, int n, const WeightMatrix& w, const float* bias, float* y,
            bool accumulate, const SkinnyKernels& kernels, int threads) {
  if (n <= 0 || w.out <= 0) return;
  const Product product{w, y, accumulate};
  skinny_products(x, n, {&product, 1}, kernels, threads);
  if (bias) {
    for (long r = 0; r < n; ++r) {
      float* row = y + r * w.out;
      for (long o = 0; o < w.out; ++o) row[o] += bias[o];
    }
  }
}

void linear_group(const ProductInput& x, int n, std::span<const Product> products,
                  const SkinnyKernels& kernels, int threads) {
  if (n <= 0 || products.empty()) return;
  skinny_products(x, n, products, kernels, threads);
}

}  // namespace photon::cpu
