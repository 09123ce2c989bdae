// The CUDA backend's device runtime: error conversion, and device selection with one stream.
// Every CUDA or cuBLAS failure becomes photon::Error, never an abort: PHOTON_ERR_OUT_OF_MEMORY for
// allocation failures, PHOTON_ERR_DEVICE for everything else, with the failing call and the
// runtime's own message.
//
// Kernels run asynchronously: a fault inside one is reported by the next call that checks (a later
// launch, a copy back to the host, Device::synchronize), and it leaves the CUDA context unusable.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"

namespace photon::cuda {

// Throws photon::Error when status is not success; `call` names what failed.
void check_cuda(cudaError_t status, std::string_view call);
void check_cublas(cublasStatus_t status, std::string_view call);
// After a kernel launch: reports a bad launch configuration or an earlier asynchronous fault.
void check_launch(std::string_view kernel);

// q8 operands, which the op contract (backend.h) and the backend's weight() keep from every
// kernel: PHOTON_ERR_INTERNAL naming the kernel.
[[noreturn]] void q8_unsupported(std::string_view kernel);

#define PHOTON_CUDA_CHECK(call) ::photon::cuda::check_cuda((call), #call)
#define PHOTON_CUBLAS_CHECK(call) ::photon::cuda::check_cublas((call), #call)

// Number of usable CUDA devices. Never throws: without a driver or a device it returns 0 and, when
// `reason` is given, says why (for test skips and error messages).
int device_count(std::string* reason = nullptr);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0;  // the most dynamic shared memory a block may opt into
};

// One GPU and the stream that every op of a session group is issued on. Selecting the device is
// per host thread in CUDA: a thread issues work inside a DeviceScope of the device.
class Device {
 public:
  // Fails with PHOTON_ERR_DEVICE when the ordinal has no device or the device is older than
  // compute capability 8.0 (the backend is built for sm_80 and sm_90).
  explicit Device(int ordinal = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  cudaStream_t stream() const { return stream_; }
  // Waits for all work on the stream; an asynchronous fault surfaces here as photon::Error.
  void synchronize() const;

 private:
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
};

// Makes a device the calling thread's current one for a scope, and gives the thread its own back
// at the end, so that a program's own CUDA work on another device is not disturbed.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int ordinal_;
};

}  // namespace photon::cuda
