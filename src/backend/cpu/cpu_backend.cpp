#include "backend/cpu/cpu_backend.h"

#include <bit>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/embed.h"
#include "backend/cpu/host_tensor.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/logprob.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quantize_int8.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/sample.h"
#include "backend/cpu/swiglu.h"
#include "backend/cpu/thread_pool.h"

namespace photon::cpu {

namespace {

constexpr std::align_val_t kAlignment{64};

// Allocates as the backend's buffers are aligned, to cache lines: the kernels load the rows of a
// product's input as whole vectors, and a vector split across two lines costs two loads (bf16
// precision's rounded input in 16-byte aligned scratch made vanilla-600m decode 8-9% slower on a
// Xeon).
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  bool operator==(const CacheLineAllocator&) const = default;
};

// Scratch of one thread for a product's input.
template <typename T>
using ProductScratch = std::vector<T, CacheLineAllocator<T>>;
// Logits per thread below which sampling and log-probabilities stay on the calling thread: two
// rows of a 32,000-token vocabulary.
constexpr long kMinSampledPerThread = 1L << 16;

// Host memory from operator new, not written here: pages are backed when first touched.
class HostBuffer final : public Buffer {
 public:
  HostBuffer(const Backend* owner, size_t bytes, MemoryCounter& counter)
      : Buffer(owner, bytes ? ::operator new(bytes, kAlignment) : nullptr, bytes),
        counter_(counter) {
    counter_.add(bytes);
  }
  ~HostBuffer() override {
    if (base()) ::operator delete(base(), kAlignment);
    counter_.remove(bytes());
  }

 private:
  MemoryCounter& counter_;
};

// Memory the backend does not own (the model file's mapping).
class HostView final : public Buffer {
 public:
  HostView(const Backend* owner, const void* data, size_t bytes)
      : Buffer(owner, const_cast<void*>(data), bytes) {}
};

int rows_of(const Tensor& t) {
  return static_cast<int>(t.rows);
}
int cols_of(const Tensor& t) {
  return static_cast<int>(t.cols);
}

// A weight tensor as the kernels take it.
WeightMatrix matrix(const Tensor& w) {
  return {host<const char>(w), w.dtype, rows_of(w), cols_of(w)};
}

}  // namespace

CpuBackend::CpuBackend(int threads, CpuKernels kernels, Precision precision)
    : Backend(precision),
      threads_(threads > 0 ? threads : available_cores()),
      kernels_(kernels),
      functions_(kernel_functions(kernels)),
      bf16_dot_(precision == Precision::Bf16 && kernels == CpuKernels::Avx512 &&
                cpu_has_fast_bf16_dot()) {}

std::unique_ptr<Buffer> CpuBackend::allocate(size_t bytes, std::string_view) {
  return std::make_unique<HostBuffer>(this, bytes, memory_);
}

Tensor CpuBackend::do_weight(const HostWeight& source, std::string_view) {
  const size_t n = static_cast<size_t>(source.rows) * source.cols;
  std::unique_ptr<Buffer> buffer;
  DType dtype = source.dtype;
  if (dtype == DType::F32 || source.rows > 1) {
    // Matrices stay in the mapping in their stored type: linear and embed read bf16, f16 and q8.
    buffer = std::make_unique<HostView>(this, source.data, dtype_bytes(dtype, n));
  } else {
    // Vectors (norms, biases, the start latent) are read as f32 activations: widened, tiny.
    buffer = allocate(n * sizeof(float), "weight");
    convert_to_f32(dtype, source.data, static_cast<float*>(buffer->base()), n);
    dtype = DType::F32;
  }
  const Tensor t{buffer.get(), 0, source.rows, source.cols, dtype};
  std::lock_guard<std::mutex> lock(weights_mutex_);
  weights_.push_back(std::move(buffer));
  return t;
}

void CpuBackend::do_upload(const Tensor& dst, const void* src) {
  if (dst.bytes() > 0) std::memcpy(host<char>(dst), src, dst.bytes());
}

void CpuBackend::do_download(void* dst, const Tensor& src) {
  if (src.bytes() > 0) std::memcpy(dst, host<char>(src), src.bytes());
}

void CpuBackend::do_copy_rows(std::span<const RowCopy> copies) {
  for (const RowCopy& c : copies)
    if (c.src.bytes() > 0) std::memcpy(host<char>(c.dst), host<char>(c.src), c.src.bytes());
}

void CpuBackend::do_embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) {
  cpu::embed(host<char>(table), table.dtype, cols_of(table), ids, host(out));
}

void CpuBackend::do_rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) {
  cpu::rmsnorm(host(x), host(w), host(y), rows_of(x), cols_of(x), eps, threads_);
}

ProductInput CpuBackend::product_input(const Tensor& x, bool q8_weights) {
  const size_t n = static_cast<size_t>(x.rows) * static_cast<size_t>(x.cols);
  const float* in = host(x);
  switch (precision_) {
    case Precision::Exact: return {in};
    case Precision::Bf16: {
      // The products' input rounded to bf16, kept as f32 values (exact in f32), so that the
      // kernels multiply bf16(x) by the weights in f32 as a GPU's bf16 tensor cores do; and, where
      // the bf16 dot products of bf16 weights run, the same values packed as bf16, which they take.
      thread_local ProductScratch<float> rounded;
      if (rounded.size() < n) rounded.resize(n);
      for (size_t i = 0; i < n; ++i) rounded[i] = bf16_to_f32(f32_to_bf16(in[i]));
      if (!bf16_dot_) return {rounded.data()};
      thread_local ProductScratch<cpu::Bf16> packed;
      if (packed.size() < n) packed.resize(n);
      for (size_t i = 0; i < n; ++i)
        packed[i].bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(rounded[i]) >> 16);
      return {rounded.data(), nullptr, nullptr, packed.data()};
    }
    case Precision::Int8: {
      // q8 rows are whole blocks (the op contract), so x's rows are too.
      if (!q8_weights) return {in};
      thread_local ProductScratch<int8_t> q;
      thread_local ProductScratch<float> d;
      if (q.size() < n) q.resize(n);
      if (d.size() < n / 32) d.resize(n / 32);
      quantize_int8(in, x.rows, static_cast<int>(x.cols), q.data(), d.data());
      return {in, q.data(), d.data()};
    }
  }
  return {in};
}

void CpuBackend::do_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                           bool accumulate) {
  cpu::linear(product_input(x, w.dtype == DType::Q8), rows_of(x), matrix(w),
              bias ? host(*bias) : nullptr, host(y), accumulate, functions_, threads_);
}

void CpuBackend::do_linear_group(const Tensor& x, std::span<const LinearOut> outs) {
  std::vector<Product> products;
  products.reserve(outs.size());
  bool q8 = false;
  for (const LinearOut& o : outs) {
    products.push_back({matrix(o.w), host(o.y), o.accumulate});
    q8 = q8 || o.w.dtype == DType::Q8;
  }
  cpu::linear_group(product_input(x, q8), rows_of(x), products, functions_, threads_);
}

void CpuBackend::do_rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                               const Tensor& table) {
  cpu::rope_table(positions.data(), static_cast<int>(positions.size()), head_dim, theta,
                  host(table));
}

void CpuBackend::do_rope(const Tensor& x, int heads, const Tensor& table) {
  cpu::rope_apply(host(x), rows_of(x), heads, cols_of(x) / heads, host(table), threads_);
}

void CpuBackend::do_swiglu(const Tensor& gate, const Tensor& up) {
  cpu::swiglu(host(gate), host(up), static_cast<size_t>(gate.rows) * gate.cols, threads_);
}

void CpuBackend::do_kv_append(const Tensor& k, const Tensor& v,
                              std::span<const AttentionSegment> segments) {
  for (const AttentionSegment& s : segments) {
    const Tensor k_rows = k.slice(s.row0, s.rows), v_rows = v.slice(s.row0, s.rows);
    const size_t n = static_cast<size_t>(k_rows.rows * k_rows.cols);
    if (n == 0) continue;
    // A 16-bit cache takes each value rounded to nearest even, once.
    convert_from_f32(s.k.dtype, host(k_rows), host<char>(s.k.slice(s.start, s.rows)), n);
    convert_from_f32(s.v.dtype, host(v_rows), host<char>(s.v.slice(s.start, s.rows)), n);
  }
}

void CpuBackend::do_attention(const Tensor& q, const AttentionShape& shape,
                              std::span<const AttentionSegment> segments, const Tensor& out) {
  cpu::attention(host(q), shape, segments, host(out), functions_, threads_);
}

void CpuBackend::do_sample(const Tensor& logits, std::span<const SampleRequest> rows,
                           int32_t* tokens, float* logprobs) {
  const int vocab = cols_of(logits);
  const long count = static_cast<long>(rows.size());
  // Each row's token depends on its own logits, seed and position only, so the rows of many
  // sessions share the threads, each thread with its own sampler and copy of a row: one row of
  // 32,000 logits takes about 0.25 ms at temperature 1, up to 2.9 ms with top-p on a flat row
  // (docs/performance.md).
  const int threads = threads_for(count * vocab, kMinSampledPerThread, threads_);
  std::vector<Sampler> samplers(threads);
  std::vector<std::vector<float>> copies(threads);
  std::vector<std::exception_ptr> failures(threads);  // the loop's items must not throw
  parallel_for(threads, count, [&](long i, int slot) {
    try {
      const float* raw = host(logits.row(i));
      std::vector<float>& row = copies[slot];
      row.assign(raw, raw + vocab);  // the sampler filters in place; the log-probability is raw
      const SampleRequest& r = rows[i];
      tokens[i] = samplers[slot].sample(*r.config, row.data(), vocab, r.position, r.history);
      logprobs[i] = static_cast<float>(raw[tokens[i]] - log_sum_exp(raw, vocab));
    } catch (...) {
      failures[slot] = std::current_exception();
    }
  });
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

void CpuBackend::do_logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) {
  const int vocab = cols_of(logits);
  const long count = static_cast<long>(targets.size());
  parallel_for(threads_for(count * vocab, kMinSampledPerThread, threads_), count, [&](long i, int) {
    const float* row = host(logits.row(i));
    out[i] = static_cast<float>(row[targets[i]] - log_sum_exp(row, vocab));
  });
}

}  // namespace photon::cpu

namespace photon {

std::unique_ptr<Backend> make_cpu_backend(int threads, Precision precision) {
  return std::make_unique<cpu::CpuBackend>(threads, cpu::default_cpu_kernels(), precision);
}

}  // namespace photon
