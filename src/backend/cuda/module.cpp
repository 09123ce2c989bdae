// The entry point of libphoton-cuda.so (backend/module.h): checks that the caller is the
// libphoton of the same build, that a driver and the device are there, and creates the backend.
// Nothing may escape it as an exception: failures become a status and a message.
#include "backend/module.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <new>
#include <string>

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
    require_device(request->ordinal);
    const photon::cuda::DeviceScope scope(request->ordinal);  // the caller's device comes back
    photon::cuda::CudaOptions options;
    options.ordinal = request->ordinal;
    options.exact_f32 = request->exact_f32 != 0;
    *out = new photon::cuda::CudaBackend(options);
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
