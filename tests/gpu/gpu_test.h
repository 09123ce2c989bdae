// Shared by the GPU tests: whether a CUDA device is there (the tests that need one skip visibly
// without it, "no CUDA device: <why>"), and the CUDA backend made as a model makes it, through
// make_backend and the module libphoton-cuda.so, held through the Backend interface.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/cuda/runtime.h"
#include "backend/device.h"
#include "core/error.h"

namespace photon::gpu_test {

// The CUDA backend on device 0; PHOTON_ERR_UNSUPPORTED "no CUDA device: <why>" without a device.
// With one, any failure to make it is the test's failure.
inline std::unique_ptr<Backend> cuda_backend(bool exact_f32 = false,
                                             Precision precision = Precision::Exact) {
  std::string reason;
  if (cuda::device_count(&reason) == 0) fail(PHOTON_ERR_UNSUPPORTED, "no CUDA device: " + reason);
  DeviceChoice choice;
  choice.kind = DeviceChoice::Kind::Cuda;
  choice.exact_f32 = exact_f32;
  choice.precision = precision;
  return make_backend(choice);
}

// A test that needs a device.
class GpuTest : public ::testing::Test {
 public:
  void SetUp() override {
    std::string reason;
    if (cuda::device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  }
};

// A test of the CUDA backend through the interface.
class GpuBackendTest : public GpuTest {
 public:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    backend_ = cuda_backend();
  }
  Backend& backend() { return *backend_; }

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace photon::gpu_test
