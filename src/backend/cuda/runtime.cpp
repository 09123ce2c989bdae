#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

bool is_allocation_failure(cudaError_t status) {
  return status == cudaErrorMemoryAllocation;
}

// What the caller can do about a failure, where the runtime's own text does not say it.
std::string advice(cudaError_t status) {
  switch (status) {
    // A fault inside a kernel: the process's CUDA context is lost, with every model on it.
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return "; a GPU kernel faulted (possibly an earlier one: kernels report asynchronously), and "
             "CUDA refuses all further work in this process: restart it";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "; this build has no code for the GPU: build again with "
             "-DCMAKE_CUDA_ARCHITECTURES set to its compute capability (90 for H100 / H200)";
    default: return "";
  }
}

}  // namespace

void check_cuda(cudaError_t status, std::string_view call) {
  if (status == cudaSuccess) return;
  // Clears the error unless it is sticky, so that a failed allocation does not resurface at the
  // next launch check.
  cudaGetLastError();
  const std::string message = "CUDA: " + std::string(call) +
                              " failed: " + cudaGetErrorString(status) + " (" +
                              cudaGetErrorName(status) + ")" + advice(status);
  fail(is_allocation_failure(status) ? PHOTON_ERR_OUT_OF_MEMORY : PHOTON_ERR_DEVICE, message);
}

void check_cublas(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string message = "cuBLAS: " + std::string(call) +
                              " failed: " + cublasLtGetStatusString(status) + " (" +
                              cublasLtGetStatusName(status) + ")";
  fail(status == CUBLAS_STATUS_ALLOC_FAILED ? PHOTON_ERR_OUT_OF_MEMORY : PHOTON_ERR_DEVICE,
       message);
}

void check_launch(std::string_view kernel) {
  check_cuda(cudaGetLastError(), "launch of " + std::string(kernel));
}

void q8_unsupported(std::string_view kernel) {
  fail(PHOTON_ERR_INTERNAL, std::string(kernel) + ": q8 operands are not computed on the GPU");
}

int device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (reason)
      *reason = std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
    return 0;
  }
  if (count == 0 && reason) *reason = "the CUDA runtime reports no device";
  return count;
}

Device::Device(int ordinal) {
  std::string reason;
  const int count = device_count(&reason);
  if (count == 0) fail(PHOTON_ERR_DEVICE, "no CUDA device: " + reason);
  if (ordinal < 0 || ordinal >= count)
    fail(PHOTON_ERR_DEVICE, "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                std::to_string(count) + " present)");
  PHOTON_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  PHOTON_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  info_.ordinal = ordinal;
  info_.name = prop.name;
  info_.major = prop.major;
  info_.minor = prop.minor;
  info_.multiprocessors = prop.multiProcessorCount;
  info_.memory_bytes = prop.totalGlobalMem;
  info_.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  info_.shared_per_block_optin = prop.sharedMemPerBlockOptin;
  if (prop.major < 8)
    fail(PHOTON_ERR_DEVICE, "CUDA device " + std::to_string(ordinal) + " (" + info_.name +
                                ") has compute capability " + std::to_string(prop.major) + "." +
                                std::to_string(prop.minor) +
                                "; the CUDA backend is built for 8.0 and 9.0");
  PHOTON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Device::~Device() {
  if (stream_) {
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(info_.ordinal);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    if (previous >= 0) cudaSetDevice(previous);
    cudaGetLastError();
  }
}

void Device::synchronize() const {
  PHOTON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

DeviceScope::DeviceScope(int ordinal) : ordinal_(ordinal) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != ordinal_) PHOTON_CUDA_CHECK(cudaSetDevice(ordinal_));
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && previous_ != ordinal_ && cudaSetDevice(previous_) != cudaSuccess)
    cudaGetLastError();
}

}  // namespace photon::cuda
