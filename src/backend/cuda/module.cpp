// The entry point of libphoton-cuda.so (backend/module.h): checks that the caller is the
// libphoton of the same build, that a driver and the device are there, and creates the backend.
// Nothing may escape it as an exception: failures become a status and a message. The backend it
// creates reports its ops' failures the same way, through the caller's `raise` (module.h says why).
#include "backend/module.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>

#include "backend/cuda/cuda_backend.h"

namespace {

std::string runtime_version() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) return "?";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// PHOTON_ERR_DEVICE saying whether the driver or the device is what is missing.
void require_device(int ordinal) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    const std::string why =
        std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
    if (status == cudaErrorNoDevice)
      photon::fail(PHOTON_ERR_DEVICE, "no CUDA device: the NVIDIA driver sees no GPU: " + why);
    photon::fail(PHOTON_ERR_DEVICE,
                 "no CUDA driver: the NVIDIA driver is missing, cannot start, or is older than "
                 "this build's CUDA runtime " +
                     runtime_version() + ": " + why);
  }
  if (count == 0) photon::fail(PHOTON_ERR_DEVICE, "no CUDA device: the driver reports no GPU");
  if (ordinal >= count)
    photon::fail(PHOTON_ERR_DEVICE, "no CUDA device: cuda:" + std::to_string(ordinal) +
                                        " was asked for, but this machine has " +
                                        std::to_string(count) +
                                        " (cuda:0 .. cuda:" + std::to_string(count - 1) + ")");
}

void write(char* message, size_t capacity, const std::string& text) {
  if (message != nullptr && capacity > 0) std::snprintf(message, capacity, "%s", text.c_str());
}

using photon::AttentionSegment;
using photon::AttentionShape;
using photon::Buffer;
using photon::HostWeight;
using photon::LinearOut;
using photon::RowCopy;
using photon::SampleRequest;
using photon::Tensor;

// The backend libphoton receives: the CUDA backend, with every call libphoton can make into this
// module guarded, so that this module's photon::Error reaches libphoton as libphoton's own (through
// `raise`). The ops' public calls and their contract checks are libphoton's (backend.cpp); what
// crosses is the virtual do_<op> behind each. Other exceptions pass unchanged: std::bad_alloc and
// the other standard exceptions have one type information, in the C++ runtime both libraries
// share. A new Backend op needs its line here.
class ModuleBackend final : public photon::cuda::CudaBackend {
 public:
  ModuleBackend(const photon::cuda::CudaOptions& options, photon_backend_raise_fn raise)
      : CudaBackend(options), raise_(raise) {}

  std::string name() const override {
    return guard([&] { return CudaBackend::name(); });
  }
  int64_t prefill_pass_rows() const override {
    return guard([&] { return CudaBackend::prefill_pass_rows(); });
  }
  std::unique_ptr<Buffer> allocate(size_t bytes, std::string_view what) override {
    return guard([&] { return CudaBackend::allocate(bytes, what); });
  }

 private:
  Tensor do_weight(const HostWeight& source, std::string_view name) override {
    return guard([&] { return CudaBackend::do_weight(source, name); });
  }
  void do_upload(const Tensor& dst, const void* src) override {
    guard([&] { CudaBackend::do_upload(dst, src); });
  }
  void do_download(void* dst, const Tensor& src) override {
    guard([&] { CudaBackend::do_download(dst, src); });
  }
  void do_copy_rows(std::span<const RowCopy> copies) override {
    guard([&] { CudaBackend::do_copy_rows(copies); });
  }
  void do_embed(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) override {
    guard([&] { CudaBackend::do_embed(table, ids, out); });
  }
  void do_rmsnorm(const Tensor& x, const Tensor& w, const Tensor& y, float eps) override {
    guard([&] { CudaBackend::do_rmsnorm(x, w, y, eps); });
  }
  void do_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                 bool accumulate) override {
    guard([&] { CudaBackend::do_linear(x, w, bias, y, accumulate); });
  }
  void do_linear_group(const Tensor& x, std::span<const LinearOut> outs) override {
    guard([&] { CudaBackend::do_linear_group(x, outs); });
  }
  void do_rope_table(std::span<const int64_t> positions, int head_dim, float theta,
                     const Tensor& table) override {
    guard([&] { CudaBackend::do_rope_table(positions, head_dim, theta, table); });
  }
  void do_rope(const Tensor& x, int heads, const Tensor& table) override {
    guard([&] { CudaBackend::do_rope(x, heads, table); });
  }
  void do_swiglu(const Tensor& gate, const Tensor& up) override {
    guard([&] { CudaBackend::do_swiglu(gate, up); });
  }
  void do_kv_append(const Tensor& k, const Tensor& v,
                    std::span<const AttentionSegment> segments) override {
    guard([&] { CudaBackend::do_kv_append(k, v, segments); });
  }
  void do_attention(const Tensor& q, const AttentionShape& shape,
                    std::span<const AttentionSegment> segments, const Tensor& out) override {
    guard([&] { CudaBackend::do_attention(q, shape, segments, out); });
  }
  void do_sample(const Tensor& logits, std::span<const SampleRequest> rows, int32_t* tokens,
                 float* logprobs) override {
    guard([&] { CudaBackend::do_sample(logits, rows, tokens, logprobs); });
  }
  void do_logprobs(const Tensor& logits, std::span<const int32_t> targets, float* out) override {
    guard([&] { CudaBackend::do_logprobs(logits, targets, out); });
  }

  template <class Call>
  auto guard(Call&& call) const -> decltype(call()) {
    try {
      return call();
    } catch (const photon::Error& e) {
      raise_(e.status(), e.what());
      throw;  // not reached: raise_ throws libphoton's error
    }
  }

  photon_backend_raise_fn raise_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) photon_status photon_cuda_backend_create(
    const photon_backend_request* request, photon::Backend** out, char* message, size_t capacity) {
  try {
    if (request == nullptr || out == nullptr) {
      write(message, capacity, "photon_cuda_backend_create: a NULL argument");
      return PHOTON_ERR_INVALID_ARGUMENT;
    }
    if (request->abi != PHOTON_BACKEND_ABI || request->layout != photon::backend_layout() ||
        request->version == nullptr || std::string(request->version) != PHOTON_VERSION_STRING) {
      write(message, capacity,
            std::string("the CUDA backend module was built for PHOTON ") + PHOTON_VERSION_STRING +
                " (backend interface " + std::to_string(PHOTON_BACKEND_ABI) +
                "), not for the libphoton loading it (" +
                (request->version ? request->version : "?") +
                "): install the module of the same build");
      return PHOTON_ERR_DEVICE;
    }
    if (request->raise == nullptr) {
      write(message, capacity, "photon_cuda_backend_create: no raise function");
      return PHOTON_ERR_INVALID_ARGUMENT;
    }
    require_device(request->ordinal);
    const photon::cuda::DeviceScope scope(request->ordinal);  // the caller's device comes back
    photon::cuda::CudaOptions options;
    options.ordinal = request->ordinal;
    options.exact_f32 = request->exact_f32 != 0;
    options.precision = request->bf16 != 0 ? photon::Precision::Bf16 : photon::Precision::Exact;
    *out = new ModuleBackend(options, request->raise);
    return PHOTON_OK;
  } catch (const photon::Error& e) {
    write(message, capacity, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    write(message, capacity, "out of host memory while creating the CUDA backend");
    return PHOTON_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write(message, capacity, std::string("internal error in the CUDA backend: ") + e.what());
    return PHOTON_ERR_INTERNAL;
  } catch (...) {
    write(message, capacity, "internal error in the CUDA backend");
    return PHOTON_ERR_INTERNAL;
  }
}
