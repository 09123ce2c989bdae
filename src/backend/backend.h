// The backend interface: the only way the model logic (src/engine) reaches memory and arithmetic.
// A backend owns buffers in its own memory (host memory for the CPU, device memory for CUDA);
// tensors are views into them; ops run over those views. The engine never dereferences a tensor:
// what crosses back to the host are token ids, log-probabilities and, for saving a session, the
// contents of its caches (download).
//
// Every tensor an op takes is a row-major [rows, cols] matrix of f32 unless said otherwise. Ops
// fail by throwing photon::Error (PHOTON_ERR_OUT_OF_MEMORY for memory, PHOTON_ERR_DEVICE for a
// device fault); the C boundary turns that into a status. One backend serves one model and may be
// called from several threads at once on different tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/memory.h"
#include "backend/tensor.h"
#include "core/sampling.h"

namespace photon {

// A weight as it lies in the model file's mapping: [rows, cols] of `dtype`.
struct HostWeight {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Rows [row0, row0 + rows) of the query (and new key/value) matrix continue one sequence whose
// cache for one layer is k, v [capacity, kv_dim]: they take positions start .. start + rows - 1
// and attend causally to positions 0 .. their own.
struct AttentionSegment {
  int row0 = 0;
  int rows = 0;
  int start = 0;
  Tensor k;
  Tensor v;
};

struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

// dst and src have the same shape (any number of rows); they may live in different buffers.
struct RowCopy {
  Tensor dst;
  Tensor src;
};

// One product of linear_group: w [out, in] as weight() returned it, y [n, out] f32.
struct LinearOut {
  Tensor w;
  Tensor y;
};

// One row of logits to sample: the settings, the position (the counter of the random draw) and
// the history the repetition penalty looks at.
struct SampleRequest {
  const SamplerConfig* config = nullptr;
  int64_t position = 0;
  std::span<const int32_t> history;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  // Rows worth gathering into one pass of a batched prefill: beyond them this device's GEMMs gain
  // little and the pass's workspace only grows.
  virtual int64_t prefill_pass_rows() const = 0;

  // ---- memory ----
  // Uninitialized memory (the CPU backs a page only when it is first written, so a KV cache sized
  // for a whole context costs nothing until used). `what` names it in out-of-memory messages.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) = 0;
  // What this backend's allocations hold (memory.h); reset_peak restarts the peak from now.
  MemoryUse memory(bool reset_peak) { return memory_.read(reset_peak); }
  // A weight in the backend's compute form, alive as long as the backend: the CPU uses matrices in
  // place from the mapping in their stored type (linear and embed read f32, bf16 and f16) and
  // widens vectors ([1, n]: norms, biases) to f32.
  virtual Tensor weight(const HostWeight& source, std::string_view name) = 0;
  // Whole-tensor copies between host memory and a tensor (host data in the tensor's dtype).
  virtual void upload(const Tensor& dst, const void* src) = 0;
  virtual void download(void* dst, const Tensor& src) = 0;
  // Every copy, in order.
  virtual void copy_rows(std::span<const RowCopy> copies) = 0;

  // ---- ops (spec section 2) ----
  // out[i] = table[ids[i]], widened to f32; table [V, D] in its stored type, out [n, D].
  virtual void embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) = 0;
  // y = x / sqrt(mean(x^2) + eps) * w per row; x, y [n, d] (may alias), w [1, d].
  virtual void rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) = 0;
  // y[n, out] (+)= x[n, in] . w[out, in]^T (+ bias[1, out]); bias may be null; w as weight()
  // returned it (any dtype), x and y f32.
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                      bool accumulate) = 0;
  // linear(x, out.w, nullptr, out.y, false) for every out: one input, several weight matrices of
  // its width (attention's Q, K, V; the FFN's gate, up), each result as its own call gives it, in
  // one pass of the backend's work (the CPU's threads share all the outputs; CUDA splits x once).
  virtual void linear_group(const Tensor& x, std::span<const LinearOut> outs) = 0;
  // table [n, head_dim]: cos(p theta_i) in columns [0, head_dim/2), sin in the rest, for the
  // positions of the n rows.
  virtual void rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                          const Tensor& table) = 0;
  // Rotates every head of each row of x [n, heads * head_dim] with its table row (rotate-half).
  virtual void rope(const Tensor& x, int heads, const Tensor& table) = 0;
  // gate = silu(gate) * up, elementwise; both [n, f].
  virtual void swiglu(const Tensor& gate, const Tensor& up) = 0;
  // Stores rows of k, v [n, kv_dim] at their segments' positions.
  virtual void kv_append(const Tensor& k, const Tensor& v,
                         std::span<const AttentionSegment> segments) = 0;
  // Causal grouped-query attention of q [n, heads * head_dim] against each segment's cache; out
  // [n, heads * head_dim], heads concatenated.
  virtual void attention(const Tensor& q, const AttentionShape& shape,
                         std::span<const AttentionSegment> segments, const Tensor& out) = 0;

  // ---- results for the host ----
  // Samples one token per row of logits [n, V] (core/sampling.h) and its log-probability under
  // the raw logits.
  virtual void sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
                      float* logprobs) = 0;
  // out[i] = log softmax(logits row i)[targets[i]].
  virtual void logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) = 0;

 protected:
  // Every implementation counts what it allocates and frees here.
  MemoryCounter memory_;
};

// A new [rows, cols] tensor of `dtype` in the backend's memory, uninitialized.
inline Matrix new_matrix(Backend& backend, int64_t rows, int64_t cols, std::string_view what,
                         DType dtype = DType::F32) {
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * dtype_size(dtype);
  return Matrix(backend.allocate(bytes, what), rows, cols, dtype);
}

// The same, filled with zeros (small state that is saved whole, so its bytes are defined).
inline Matrix zero_matrix(Backend& backend, int64_t rows, int64_t cols, std::string_view what) {
  Matrix m = new_matrix(backend, rows, cols, what);
  const std::vector<float> zeros(static_cast<size_t>(rows) * static_cast<size_t>(cols), 0.0f);
  backend.upload(m, zeros.data());
  return m;
}

// The CPU backend, the reference of every other backend. threads: the most threads one call may
// compute with, the calling thread included (0: every core the process may run on).
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace photon
