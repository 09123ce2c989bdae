// The CUDA backend: the backend interface (backend/backend.h) over the kernels of this folder, on
// one GPU. It is built into the module libphoton-cuda.so (module.cpp), which libphoton loads when
// a model is asked to run on a GPU.
//
// Memory: buffers (weights, KV caches, the runners' workspaces) come from a stream-ordered memory
// pool of the device that keeps what is freed (cudaMallocFromPoolAsync / cudaFreeAsync with no
// release threshold), so that sessions created and freed again, and workspaces that grow, reuse
// device memory without a cudaMalloc or a device synchronization. An op's own scratch (staged
// descriptors, rounded GEMM operands, attention partials, the sampler's rows) is taken from one
// arena that grows to the largest step and is rewound after every op, so steady decoding
// allocates nothing. Small host tables reach the device through a pinned staging buffer, so
// their copies stay asynchronous.
//
// Weights: uploaded once from the mapped file on first use; matrices in bf16 (f16 files keep
// f16, f32 files are converted, unless exact_f32), vectors (norms, biases, the start latent) in
// f32. Activations, the residual stream, logits and KV caches are f32.
//
// Threads: every op and every allocation or release takes the backend's lock and issues its work
// on the backend's one stream, so a model may be used by several host threads at once; their
// steps take turns. Results reach the host only through sample, logprobs and download, which wait
// for the stream.
#pragma once

#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/linear.h"
#include "backend/cuda/profiler.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

// A tensor's device address (the op contract has checked that it is in the backend's memory).
inline void* address(const Tensor& t) {
  return t.buffer ? static_cast<char*>(t.buffer->base()) + t.offset : nullptr;
}
inline float* f32(const Tensor& t) {
  return static_cast<float*>(address(t));
}

struct CudaOptions {
  int ordinal = 0;
  bool exact_f32 = false;  // DeviceChoice::exact_f32
  Precision precision = Precision::Bf16;
};

// Not final: the module derives the backend it hands to libphoton from it (module.cpp).
class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;

  std::string name() const override;
  // Thousands of rows fill the GPU's tensor cores; one session's prompt slice (512) does not.
  // PHOTON_CUDA_PREFILL_ROWS overrides the default (kPrefillPassRows), for measuring.
  int64_t prefill_pass_rows() const override { return prefill_pass_rows_; }

  std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) override;

  // Returns a pool buffer (Buffer destructors call it).
  void release(void* device_memory) noexcept;

 protected:
  // The ops (backend.h), for the module's backend to wrap (module.cpp).
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

 private:
  // Held by every op: the backend's lock, with its device current on the calling thread (the
  // thread's own device comes back afterwards). An op names itself for the profiler.
  class Lock {
   public:
    explicit Lock(const CudaBackend& backend, const char* op = nullptr);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    // For the profile: the op's rows, then its other dimensions.
    void shape(std::initializer_list<int64_t> dims) {
      if (profiler_) profiler_->shape(dims);
    }

   private:
    std::lock_guard<std::recursive_mutex> guard_;
    DeviceScope device_;
    Profiler* profiler_;
    cudaStream_t stream_;
  };
  class PinnedHost;

  cudaStream_t stream() const { return device_.stream(); }
  void* pool_allocate(size_t bytes, std::string_view what);
  // Makes the arena hold `bytes` in pieces of up to `pieces` allocations (alignment), waiting for
  // the stream before it replaces a smaller arena.
  void reserve_scratch(size_t bytes, int pieces);
  // Host bytes in pinned memory that stay untouched until the next synchronize().
  void* pinned(size_t bytes);
  // Copies host items into the arena, through pinned memory, in stream order; null when empty.
  template <class T>
  T* stage(std::span<const T> items, std::string_view what) {
    if (items.empty()) return nullptr;
    void* host = pinned(items.size_bytes());
    std::memcpy(host, items.data(), items.size_bytes());
    T* device = scratch_.take<T>(items.size(), what);
    check_cuda(cudaMemcpyAsync(device, host, items.size_bytes(), cudaMemcpyHostToDevice, stream()),
               "cudaMemcpyAsync of " + std::string(what));
    return device;
  }
  // Waits for the stream: results are on the host and staged memory may be reused.
  void synchronize();
  // attention() over segments whose caches are all of kv_dtype.
  void attention_of_type(const Tensor& q, const AttentionShape& shape, DType kv_dtype,
                         std::span<const DeviceSegment> segments, const Tensor& out);

  mutable std::recursive_mutex mutex_;
  Device device_;  // first: its stream outlives every member below
  const bool exact_f32_;
  const int64_t prefill_pass_rows_;
  cudaMemPool_t pool_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  Arena scratch_;
  std::unique_ptr<PinnedHost> pinned_;
  size_t pinned_used_ = 0;
  std::vector<std::unique_ptr<Buffer>> weights_;
  std::unique_ptr<Profiler> profiler_;  // PHOTON_CUDA_PROFILE; before the stream goes
};

}  // namespace photon::cuda
