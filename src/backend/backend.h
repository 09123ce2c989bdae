// The backend interface: the only way the model logic (src/engine) reaches memory and arithmetic.
// A backend owns buffers in its own memory (host memory for the CPU, device memory for CUDA);
// tensors are views into them; ops run over those views. The engine never dereferences a tensor:
// what crosses back to the host are token ids, log-probabilities and, for saving a session, the
// contents of its caches (download). One backend serves one model and may be called from several
// threads at once on different tensors.
//
// The op contract. Every public call that takes tensors is non-virtual: it checks its operands
// against the rules below once, then calls the backend's implementation (do_<call>), which may
// take all of them for granted. A broken rule is a bug of the caller, not bad input: the call
// throws photon::Error with PHOTON_ERR_INTERNAL and a message naming the backend, the call and
// the operand ("cpu linear: y is 3 x 80 f32, expected 3 x 96 f32"), and computes nothing.
// - Memory: every tensor lies wholly inside a buffer of this backend (a tensor of no bytes may
//   have none). Host pointers are not null where there is something to read or write.
// - Types: activations, outputs, tables, norms and biases are f32. Weight matrices (linear, embed)
//   are as weight() returned them: f32, bf16, f16 or q8 (rows of whole 32-value blocks). KV caches
//   are f32, bf16 or f16, K and V of a segment of one type.
// - Shapes: as each call states; n is the number of rows of the call's first tensor.
// - Aliasing: an output shares no byte with another operand of the same call, except where a call
//   says it may be the same tensor (rmsnorm's y and x) or works in place (rope, swiglu's gate).
// Failures of the computation itself throw photon::Error too: PHOTON_ERR_OUT_OF_MEMORY for memory,
// PHOTON_ERR_DEVICE for a device fault, PHOTON_ERR_UNSUPPORTED for a shape within the contract
// that a backend cannot run (CUDA attention above 256 values per head); the C boundary turns it
// into a status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/descriptors.h"
#include "backend/memory.h"
#include "backend/tensor.h"
#include "core/sampling.h"

namespace photon {

// How products of activations and weights compute (photon_load_options_set_precision):
// - Exact: the activations enter in f32 (the CPU's f32 arithmetic; on a GPU, two 16-bit terms
//   that carry about 17 bits of each).
// - Bf16: the activations are rounded to bf16 (nearest even) before each product, which
//   accumulates in f32: one tensor-core term on a GPU.
// - Int8 (the CPU only): products with q8 weights take the activations quantized to int8 per
//   block of 32 values, with a scale per block, and multiply them in integers (as llama.cpp's
//   Q8_0 does); every other product as Exact.
// Every other op is the same at every precision.
enum class Precision { Exact, Bf16, Int8 };

// "exact" | "bf16" | "int8".
inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Exact: return "exact";
    case Precision::Bf16: return "bf16";
    case Precision::Int8: return "int8";
  }
  return "exact";
}

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  // How linear and linear_group compute, fixed when the backend is made.
  Precision precision() const { return precision_; }
  // Rows worth gathering into one pass of a batched prefill: beyond them this device's GEMMs gain
  // little and the pass's workspace only grows.
  virtual int64_t prefill_pass_rows() const = 0;

  // ---- memory ----
  // Uninitialized memory (the CPU backs a page only when it is first written, so a KV cache sized
  // for a whole context costs nothing until used). `what` names it in out-of-memory messages.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) = 0;
  // What this backend's allocations hold (memory.h); reset_peak restarts the peak from now.
  MemoryUse memory(bool reset_peak) { return memory_.read(reset_peak); }
  // A weight in the backend's compute form, alive as long as the backend, of source's shape
  // (rows, cols > 0, data not null): matrices in a dtype the backend chooses (the CPU uses them in
  // place from the mapping, in their stored type), vectors ([1, n]: norms, biases) in f32.
  Tensor weight(const HostWeight& source, std::string_view name);
  // Whole-tensor copies between host memory and a tensor (host data in the tensor's dtype).
  void upload(const Tensor& dst, const void* src);
  void download(void* dst, const Tensor& src);
  // Every copy, in order (a copy reads what the ones before it wrote); each copy's dst and src
  // share no byte.
  void copy_rows(std::span<const RowCopy> copies);

  // ---- ops (spec section 2) ----
  // out[i] = table[ids[i]], widened to f32; table [V, D] as weight() returned it, ids in [0, V),
  // out [ids.size(), D].
  void embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out);
  // y = x / sqrt(mean(x^2) + eps) * w per row; x, y [n, d] (y may be x itself), w [1, d],
  // eps >= 0.
  void rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps);
  // y[n, out] (+)= x[n, in] . w[out, in]^T (+ bias[1, out]); bias may be null.
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
              bool accumulate);
  // linear(x, out.w, nullptr, out.y, out.accumulate) for every out: one input, several weight
  // matrices of its width (attention's Q, K, V; the FFN's gate, up), each result as its own call
  // gives it, in one pass of the backend's work (the CPU's threads share all the outputs; CUDA
  // splits x once). No y shares a byte with x, any w or another y.
  void linear_group(const Tensor& x, std::span<const LinearOut> outs);
  // table [2n, head_dim / 2] for the n positions (>= 0): rows 0 .. n-1 hold cos(p_r theta_i),
  // rows n .. 2n-1 sin(p_r theta_i), theta_i = theta^(-2i / head_dim); head_dim even, theta > 0.
  void rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                  const Tensor& table);
  // Rotates every head of each row of x [n, heads * head_dim] in place with the table row of its
  // position (rotate-half); table [2n, head_dim / 2] from rope_table; head_dim even.
  void rope(const Tensor& x, int heads, const Tensor& table);
  // gate = silu(gate) * up, elementwise, in place; both [n, f].
  void swiglu(const Tensor& gate, const Tensor& up);
  // Stores rows row0 .. row0 + rows - 1 of k, v [n, kv_dim] at positions start .. of their
  // segment's caches (rounded to nearest even into a 16-bit cache). Segments with rows cover
  // ascending, disjoint row ranges within [0, n); start + rows <= the caches' rows; caches
  // [capacity, kv_dim].
  void kv_append(const Tensor& k, const Tensor& v, std::span<const AttentionSegment> segments);
  // Causal grouped-query attention of q [n, heads * head_dim] against each segment's cache (keys
  // with RoPE applied; a 16-bit cache's values widened exactly), scaled by 1 / sqrt(head_dim);
  // out [n, heads * head_dim], heads concatenated; rows outside every segment are left as they
  // are. heads a multiple of kv_heads, head_dim even; segments as for kv_append with kv_dim =
  // kv_heads * head_dim.
  void attention(const Tensor& q, const AttentionShape& shape,
                 std::span<const AttentionSegment> segments, const Tensor& out);

  // ---- results for the host ----
  // Samples one token per row of logits [rows.size(), V] (core/sampling.h) and its
  // log-probability under the raw logits. Every request has a config; the history a penalty
  // reads holds tokens in [0, V).
  void sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
              float* logprobs);
  // out[i] = log softmax(logits row i)[targets[i]]; logits [targets.size(), V], targets in [0, V).
  // With top.k (1 <= k <= V), also row i's k most likely ids and their log-probabilities, the
  // most likely first, the lower id first on ties; out[i] then equals its target's value there
  // bit for bit when the target is among them.
  void logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out,
                TopRows top = {});

 protected:
  explicit Backend(Precision precision) : precision_(precision) {}

  // Every implementation counts what it allocates and frees here.
  MemoryCounter memory_;
  const Precision precision_;

 private:
  // The implementations, called once their operands have met the contract.
  virtual Tensor do_weight(const HostWeight& source, std::string_view name) = 0;
  virtual void do_upload(const Tensor& dst, const void* src) = 0;
  virtual void do_download(void* dst, const Tensor& src) = 0;
  virtual void do_copy_rows(std::span<const RowCopy> copies) = 0;
  virtual void do_embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) = 0;
  virtual void do_rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) = 0;
  virtual void do_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                         bool accumulate) = 0;
  virtual void do_linear_group(const Tensor& x, std::span<const LinearOut> outs) = 0;
  virtual void do_rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                             const Tensor& table) = 0;
  virtual void do_rope(const Tensor& x, int heads, const Tensor& table) = 0;
  virtual void do_swiglu(const Tensor& gate, const Tensor& up) = 0;
  virtual void do_kv_append(const Tensor& k, const Tensor& v,
                            std::span<const AttentionSegment> segments) = 0;
  virtual void do_attention(const Tensor& q, const AttentionShape& shape,
                            std::span<const AttentionSegment> segments, const Tensor& out) = 0;
  virtual void do_sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
                         float* logprobs) = 0;
  virtual void do_logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) = 0;
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

// The CPU backend, the reference of every other backend, with the widest vector kernels this
// processor runs (backend/cpu/cpu_features.h). threads: the most threads one call may compute
// with, the calling thread included (0: every core the process may run on).
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, Precision precision = Precision::Exact);

}  // namespace photon
