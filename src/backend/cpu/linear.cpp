#include "backend/cpu/linear.h"

#include <cblas.h>

#include <array>
#include <mutex>
#include <vector>

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
// matrices, 2 threads on a Zen 5; docs/performance.md, issue 14), still leaving the items to
// whichever thread is free.
constexpr long kOneRowChunksPerThread = 4;

// Outputs per BLAS call on the GEMM path.
constexpr long kGemmChunk = 128;

long ceil_div(long a, long b) {
  return (a + b - 1) / b;
}
long round_up(long a, long multiple) {
  return ceil_div(a, multiple) * multiple;
}

SkinnyKernel skinny_kernel(const SkinnyKernels& k, DType dtype) {
  return dtype == DType::F32 ? k.f32 : dtype == DType::BF16 ? k.bf16 : k.f16;
}

void widen(const SkinnyKernels& kernels, DType dtype, const void* src, float* dst, long n) {
  if (dtype == DType::BF16)
    kernels.widen_bf16(static_cast<const Bf16*>(src), dst, n);
  else
    kernels.widen_f16(static_cast<const F16*>(src), dst, n);
}

// GEMM of all n rows against weight rows [o0, o1) (one chunk), into columns [o0, o1) of y. 16-bit
// weights are widened into `scratch` first.
void gemm_chunk(const float* x, int n, const WeightMatrix& w, long o0, long o1, float beta,
                float* y, const SkinnyKernels& kernels, float* scratch) {
  const long in = w.in;
  const float* rows = static_cast<const float*>(w.data) + o0 * in;
  if (w.dtype != DType::F32) {
    widen(kernels, w.dtype, static_cast<const char*>(w.data) + o0 * in * 2, scratch,
          (o1 - o0) * in);
    rows = scratch;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, static_cast<int>(o1 - o0), w.in, 1.0f, x,
              w.in, rows, w.in, beta, y + o0, w.out);
}

}  // namespace

void use_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

namespace {

// The skinny kernels over the outputs of every product in one parallel region, so that a thread
// done with one matrix goes on to the next instead of waiting at the end of each.
void skinny_products(const float* x, int n, std::span<const Product> products,
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
    skinny_kernel(skinny, p.w.dtype)({x, n, p.w.in, p.w.data, static_cast<int>(c * chunk[i]),
                                      static_cast<int>(std::min<long>(p.w.out, (c + 1) * chunk[i])),
                                      p.y, p.w.out, p.accumulate});
  });
}

// Fixed chunks of outputs, so that no result depends on how many threads share them (BLAS's
// arithmetic differs with the shape of the product it is given). Each thread widens 16-bit
// chunks into its own part of the caller's buffer, kept for its next call (allocated here,
// outside the parallel region, so that a failure can be thrown).
void gemm_product(const float* x, int n, const Product& p, const SkinnyKernels& kernels,
                  int threads) {
  const WeightMatrix& w = p.w;
  const long out = w.out;
  const long chunks = ceil_div(out, kGemmChunk);
  const int t = std::min<long>(
      threads_for(static_cast<long>(n) * out * w.in, kMinMacsPerThread, threads), chunks);
  thread_local std::vector<float> scratch;
  const size_t per_thread = w.dtype == DType::F32 ? 0 : static_cast<size_t>(kGemmChunk) * w.in;
  scratch.resize(per_thread * t);
  float* const buffer = scratch.data();  // the workers have thread_local copies of their own
  const float beta = p.accumulate ? 1.0f : 0.0f;
  parallel_for(t, chunks, [&](long c, int thread) {
    gemm_chunk(x, n, w, c * kGemmChunk, std::min(out, (c + 1) * kGemmChunk), beta, p.y, kernels,
               buffer + per_thread * thread);
  });
}

}  // namespace

void linear(const float* x, int n, const WeightMatrix& w, const float* bias, float* y,
            bool accumulate, const SkinnyKernels& kernels, int threads) {
  if (n <= 0 || w.out <= 0) return;
  const Product product{w, y, accumulate};
  if (n <= kernels.max_rows)
    skinny_products(x, n, {&product, 1}, kernels, threads);
  else
    gemm_product(x, n, product, kernels, threads);
  if (bias) {
    for (long r = 0; r < n; ++r) {
      float* row = y + r * w.out;
      for (long o = 0; o < w.out; ++o) row[o] += bias[o];
    }
  }
}

void linear_group(const float* x, int n, std::span<const Product> products,
                  const SkinnyKernels& kernels, int threads) {
  if (n <= 0 || products.empty()) return;
  if (n <= kernels.max_rows) return skinny_products(x, n, products, kernels, threads);
  for (const Product& p : products) gemm_product(x, n, p, kernels, threads);
}

}  // namespace photon::cpu
