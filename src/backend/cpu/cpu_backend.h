// The CPU backend: host memory, the op files of this folder (linear: the skinny kernels at every
// row count), parallel on the process's thread pool within a thread budget of its own, with one
// of the vector kernel sets of cpu_features.h. It is the reference every other backend is tested
// against.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/linear.h"

namespace photon::cpu {

class CpuBackend final : public Backend {
 public:
  // threads: the most threads one call may compute with (the calling thread included); 0 or less
  // for every core the process may run on. kernels: PHOTON_ERR_UNSUPPORTED where this processor
  // lacks them. precision: Bf16 rounds the input of every product to bf16 first (the same
  // function as a GPU's bf16 products, in f32 arithmetic; no faster here); Int8 quantizes the
  // input of products with q8 weights and multiplies in integers.
  CpuBackend(int threads, CpuKernels kernels, Precision precision = Precision::Exact);

  std::string name() const override { return "cpu"; }
  // The blocked kernels are at speed by a few hundred rows.
  int64_t prefill_pass_rows() const override { return 512; }
  std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) override;

  CpuKernels kernels() const { return kernels_; }

 private:
  Tensor do_weight(const HostWeight& source, std::string_view name) override;
  void do_upload(const Tensor& dst, const void* src) override;
  void do_download(void* dst, const Tensor& src) override;
  void do_copy_rows(std::span<const RowCopy> copies) override;

  void do_embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) override;
  void do_rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) override;
  void do_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                 bool accumulate) override;
  void do_linear_group(const Tensor& x, std::span<const LinearOut> outs) override;
  void do_rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                     const Tensor& table) override;
  void do_rope(const Tensor& x, int heads, const Tensor& table) override;
  void do_swiglu(const Tensor& gate, const Tensor& up) override;
  void do_kv_append(const Tensor& k, const Tensor& v,
                    std::span<const AttentionSegment> segments) override;
  void do_attention(const Tensor& q, const AttentionShape& shape,
                    std::span<const AttentionSegment> segments, const Tensor& out) override;

  void do_sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
                 float* logprobs) override;
  void do_logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) override;

  // x's values as the products take them: x itself (Exact), a copy rounded to bf16 (Bf16), x
  // and, where q8_weights, its quantization (Int8); the copies are this thread's, valid until
  // its next call.
  ProductInput product_input(const Tensor& x, bool q8_weights);

  int threads_;
  CpuKernels kernels_;
  const SkinnyKernels& functions_;
  // Whether bf16 precision's products of bf16 weights take AVX512-BF16's dot product.
  bool bf16_dot_;
  std::mutex weights_mutex_;
  std::vector<std::unique_ptr<Buffer>> weights_;  // views of the mapping, widened vectors
};

}  // namespace photon::cpu
