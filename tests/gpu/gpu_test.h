// Shared by the GPU op tests: a fixture that skips visibly without a CUDA device, device buffers
// that start poisoned, fresh random inputs, and the relative error of METHOD.md.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/runtime.h"
#include "core/dtype.h"

namespace photon::gpu_test {

// Every test starts with a device and a scratch arena, or skips with "no CUDA device: <why>".
class GpuTest : public ::testing::Test {
 public:
  void SetUp() override {
    std::string reason;
    if (cuda::device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
    device_ = std::make_unique<cuda::Device>(0);
    scratch_ = std::make_unique<cuda::Arena>(size_t{512} << 20, "test scratch");
    const unsigned seed = std::random_device{}();
    rng_.seed(seed);
    // The seed is printed with any failure, so a failing draw can be replayed.
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "random seed " + std::to_string(seed));
  }
  void TearDown() override {
    if (device_) device_->synchronize();
  }

  cudaStream_t stream() const { return device_->stream(); }
  cuda::Arena& scratch() { return *scratch_; }
  const cuda::DeviceInfo& info() const { return device_->info(); }
  std::mt19937& rng() { return rng_; }

  // Device memory for n values, every byte 0xFF (NaN for floats, -1 for integers), owned by the
  // test.
  template <class T>
  T* poisoned(size_t n) {
    buffers_.emplace_back(n * sizeof(T), "test buffer");
    PHOTON_CUDA_CHECK(cudaMemsetAsync(buffers_.back().data(), 0xFF, n * sizeof(T), stream()));
    return buffers_.back().as<T>();
  }
  template <class T>
  T* upload(const std::vector<T>& host) {
    T* device = poisoned<T>(host.size());
    cuda::copy_to_device(static_cast<void*>(device), host.data(), host.size() * sizeof(T),
                         stream());
    return device;
  }
  template <class T>
  std::vector<T> download(const T* device, size_t n) {
    std::vector<T> host(n);
    cuda::copy_to_host(host.data(), static_cast<const void*>(device), n * sizeof(T), stream());
    return host;
  }

  // n values uniform in [lo, hi).
  std::vector<float> random(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

 private:
  std::unique_ptr<cuda::Device> device_;
  std::unique_ptr<cuda::Arena> scratch_;
  std::vector<cuda::DeviceBuffer> buffers_;
  std::mt19937 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

// ||out - ref|| / ||ref|| in double; infinity when out holds a NaN or infinity (an unwritten,
// poisoned element or a blow-up), so such an output never passes.
inline double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff) / std::sqrt(norm > 0.0 ? norm : 1.0);
}

// Bounds of METHOD.md: f32 arithmetic lands far under 1e-3; TF32 near 3e-4; bf16 operands between
// 1e-3 and 1e-2.
constexpr double kF32Bound = 1e-5;
constexpr double kTf32Bound = 2e-3;
constexpr double kBf16Bound = 1e-2;
// Products with 16-bit weights and two-term activations (cuda/split_activations.h): each
// activation within 2^-18 of its value, about 1e-6 on a row; one bf16 rounding would be 1e-3.
constexpr double kTwoTermBound = 3e-5;

// Values rounded through a 16-bit type and widened again.
inline std::vector<float> rounded_through(DType t, const std::vector<float>& v) {
  std::vector<uint16_t> narrow(v.size());
  std::vector<float> wide(v.size());
  convert_from_f32(t, v.data(), narrow.data(), v.size());
  convert_to_f32(t, narrow.data(), wide.data(), v.size());
  return wide;
}

inline std::vector<uint16_t> narrowed(DType t, const std::vector<float>& v) {
  std::vector<uint16_t> narrow(v.size());
  convert_from_f32(t, v.data(), narrow.data(), v.size());
  return narrow;
}

}  // namespace photon::gpu_test
