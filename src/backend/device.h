// Which device a model runs on, and the one factory that makes its backend: the CPU backend of
// this library, or the CUDA backend of the module libphoton-cuda.so, which is loaded (dlopen) the
// first time a GPU is asked for, so that libphoton itself never links CUDA.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "backend/backend.h"

namespace photon {

struct DeviceChoice {
  enum class Kind { Cpu, Cuda, Auto };
  Kind kind = Kind::Cpu;
  int ordinal = 0;  // the N of "cuda:N"
  // CUDA only: f32 weights stay f32 and their GEMMs run in plain f32 (no TF32), instead of being
  // converted to bf16 once at upload. For comparisons with the CPU at f32 tolerances.
  bool exact_f32 = false;
  // Unset: the device's default, Exact on the CPU and Bf16 on a GPU.
  std::optional<Precision> precision;
};

// "auto", "cpu", "cuda" or "cuda:N" (N a decimal ordinal); anything else is
// PHOTON_ERR_INVALID_ARGUMENT with a message that starts with `who`.
DeviceChoice parse_device(std::string_view text, std::string_view who);

// "exact", "bf16" or "int8"; anything else is PHOTON_ERR_INVALID_ARGUMENT with a message that
// starts with `who`.
Precision parse_precision(std::string_view text, std::string_view who);

// The backend for a choice. Cuda fails with PHOTON_ERR_DEVICE and a message that says what is
// missing: a CUDA build (no module), the CUDA libraries the module needs, a usable driver, or a
// device; PHOTON_ERR_OUT_OF_MEMORY when the device cannot hold the backend's own buffers. Auto
// takes the GPU when it can be had and otherwise the CPU. threads is the CPU backend's thread
// budget (0: the machine's cores).
std::unique_ptr<Backend> make_backend(const DeviceChoice& choice, int threads = 0);

}  // namespace photon
