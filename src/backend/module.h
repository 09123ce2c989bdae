// The entry point of the CUDA backend module (libphoton-cuda.so), shared by libphoton, which
// loads the module and calls it, and the module, which defines it. The entry point has C linkage
// so that dlsym finds it by a plain name; what it returns is a C++ photon::Backend, so the module
// must come from the same build as libphoton: the request carries the version and a fingerprint
// of every type that crosses, and the module refuses anything else.
//
// Failures cross as a status and a message, never as an exception of the other library's type.
// libphoton exports only photon_* (cmake/photon.version), so each library has its own, hidden,
// type information for photon::Error, and whether a catch clause in one library matches an
// exception thrown with the other's type information depends on the C++ runtime (libstdc++
// compares type names, others compare addresses; GCC documents it as unsupported). So the module
// catches its own photon::Error at every call libphoton makes into it (cuda/module.cpp) and
// hands the status and message to `raise`, a function of libphoton that throws libphoton's own
// photon::Error; libphoton's catch clauses then always see their own type. The module links
// nothing of libphoton (it uses only header-only parts of src/core and src/backend, and links
// with --no-undefined), so hiding libphoton's internals takes nothing from it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "photon.h"

// Bump when backend.h, descriptors.h or tensor.h change the meaning (not only the size) of what
// crosses, when the Backend class gains, loses or changes a virtual function, or when the request
// changes (2: linear_group; 3: raise; 4: the op contract, public calls over private do_<call>
// functions, and products that accumulate; 5: the precision).
#define PHOTON_BACKEND_ABI 5
#define PHOTON_CUDA_MODULE_NAME "libphoton-cuda.so"
#define PHOTON_CUDA_MODULE_ENTRY "photon_cuda_backend_create"

// libphoton's: throws libphoton's photon::Error(status, message) and never returns.
typedef void (*photon_backend_raise_fn)(photon_status status, const char* message);

extern "C" {

struct photon_backend_request {
  uint32_t abi;                   // PHOTON_BACKEND_ABI of the caller
  uint32_t layout;                // photon::backend_layout() of the caller
  const char* version;            // PHOTON_VERSION_STRING of the caller
  int32_t ordinal;                // CUDA device ordinal
  int32_t exact_f32;              // DeviceChoice::exact_f32
  int32_t bf16;                   // 1: Precision::Bf16, 0: Precision::Exact
  photon_backend_raise_fn raise;  // how the backend's ops report a failure to the caller
};

// Creates the backend into *out and returns PHOTON_OK, or returns the failure's status and writes
// its message, NUL-terminated and cut to `capacity` bytes, into `message`.
typedef photon_status (*photon_backend_create_fn)(const photon_backend_request* request,
                                                  photon::Backend** out, char* message,
                                                  size_t capacity);
}

namespace photon {

// A fingerprint of the sizes of the types the backend interface passes between the libraries.
constexpr uint32_t backend_layout() {
  uint32_t h = 2166136261u;
  for (size_t size :
       {sizeof(Tensor), sizeof(Buffer), sizeof(HostWeight), sizeof(AttentionSegment),
        sizeof(AttentionShape), sizeof(RowCopy), sizeof(LinearOut), sizeof(SampleRequest),
        sizeof(SamplerConfig), sizeof(std::string), sizeof(std::vector<int>)})
    h = (h ^ static_cast<uint32_t>(size)) * 16777619u;
  return h;
}

}  // namespace photon
