// The CPU backend: host memory, the op files of this folder (linear: the skinny kernels at every
// row count), parallel on the process's thread pool within a thread budget of its own. It is the
// reference every other backend is tested against.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace photon::cpu {

class CpuBackend final : public Backend {
 public:
  // threads: the most threads one call may compute with (the calling thread included); 0 or less
  // for every core the process may run on.
  explicit CpuBackend(int threads);

  std::string name() const override { return "cpu"; }
  // The blocked kernels are at speed by a few hundred rows.
  int64_t prefill_pass_rows() const override { return 512; }

  std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) override;
  Tensor weight(const HostWeight& source, std::string_view name) override;
  void upload(const Tensor& dst, const void* src) override;
  void download(void* dst, const Tensor& src) override;
  void copy_rows(std::span<const RowCopy> copies) override;

  void embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) override;
  void rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
              bool accumulate) override;
  void linear_group(const Tensor& x, std::span<const LinearOut> outs) override;
  void rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                  const Tensor& table) override;
  void rope(const Tensor& x, int heads, const Tensor& table) override;
  void swiglu(const Tensor& gate, const Tensor& up) override;
  void kv_append(const Tensor& k, const Tensor& v,
                 std::span<const photon::AttentionSegment> segments) override;
  void attention(const Tensor& q, const AttentionShape& shape,
                 std::span<const photon::AttentionSegment> segments, const Tensor& out) override;

  void sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
              float* logprobs) override;
  void logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) override;

 private:
  int threads_;
  std::mutex weights_mutex_;
  std::vector<std::unique_ptr<Buffer>> weights_;  // views of the mapping, widened vectors
};

}  // namespace photon::cpu
