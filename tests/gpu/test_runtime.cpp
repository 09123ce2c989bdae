// The device runtime: errors instead of aborts (also without a device), out-of-memory, the arena,
// and CUDA graph capture and replay of ops.
#include <functional>
#include <stdexcept>

#include "backend/cuda/linear.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/swiglu.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

photon_status status_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& e) {
    return e.status();
  }
  return PHOTON_OK;
}

// Runs everywhere: the conversion of CUDA and cuBLAS statuses needs no device.
TEST(GpuErrors, FailuresBecomeStatusesNamingTheCall) {
  try {
    cuda::check_cuda(cudaErrorMemoryAllocation, "cudaMalloc(kv)");
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), PHOTON_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(e.what()).find("cudaMalloc(kv)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(status_of([] { cuda::check_cuda(cudaErrorInvalidValue, "x"); }), PHOTON_ERR_DEVICE);
  EXPECT_EQ(status_of([] { cuda::check_cublas(CUBLAS_STATUS_ALLOC_FAILED, "x"); }),
            PHOTON_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(status_of([] { cuda::check_cublas(CUBLAS_STATUS_NOT_SUPPORTED, "x"); }),
            PHOTON_ERR_DEVICE);
  EXPECT_EQ(status_of([] { cuda::check_cuda(cudaSuccess, "x"); }), PHOTON_OK);
  // Failures the runtime's text leaves the caller helpless with say what to do.
  const auto message = [](cudaError_t status) {
    try {
      cuda::check_cuda(status, "x");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(cudaErrorIllegalAddress).find("restart"), std::string::npos);
  EXPECT_NE(message(cudaErrorNoKernelImageForDevice).find("CMAKE_CUDA_ARCHITECTURES"),
            std::string::npos);
  EXPECT_EQ(message(cudaErrorInvalidValue).find("restart"), std::string::npos);
}

// Runs only without a device (CI): asking for one is an error, not an abort.
TEST(GpuErrors, NoDeviceIsADeviceError) {
  std::string reason;
  if (cuda::device_count(&reason) > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(reason.empty());
  EXPECT_EQ(status_of([] { cuda::Device device(0); }), PHOTON_ERR_DEVICE);
  EXPECT_NE(status_of([] { cuda::DeviceBuffer buffer(1024, "probe"); }), PHOTON_OK);
}

using GpuRuntime = GpuTest;

TEST_F(GpuRuntime, DeviceDescribesItself) {
  EXPECT_FALSE(info().name.empty());
  EXPECT_GE(info().major, 8);
  EXPECT_GT(info().multiprocessors, 0);
  EXPECT_GT(info().memory_bytes, size_t{1} << 30);
  EXPECT_EQ(status_of([] { cuda::Device device(1 << 20); }), PHOTON_ERR_DEVICE);
}

TEST_F(GpuRuntime, OutOfMemoryIsAStatusAndTheDeviceStaysUsable) {
  try {
    cuda::DeviceBuffer too_big(info().memory_bytes * 2, "more than the device has");
    FAIL() << "allocating twice the device's memory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), PHOTON_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(e.what()).find("more than the device has"), std::string::npos);
  }
  // The failure is not sticky: allocation and kernels still work.
  const std::vector<float> x = random(4 * 64), w = random(64);
  float* y = poisoned<float>(x.size());
  cuda::rmsnorm(upload(x), upload(w), y, 4, 64, 1e-5f, stream());
  for (float v : download(y, x.size())) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(GpuRuntime, ArenaHandsOutAlignedPiecesAndRefusesOverflow) {
  cuda::Arena arena(size_t{1} << 20, "small");
  void* a = arena.take_bytes(10, "a");
  void* b = arena.take_bytes(300, "b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % cuda::Arena::kAlignment, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
  const size_t mark = arena.mark();
  {
    cuda::ArenaScope scope(arena);
    arena.take_bytes(1000, "c");
    EXPECT_GT(arena.used(), mark);
  }
  EXPECT_EQ(arena.used(), mark);
  EXPECT_EQ(status_of([&] { arena.take_bytes(size_t{2} << 20, "too much"); }),
            PHOTON_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(arena.used(), mark);  // a refused piece takes nothing
}

// A decode-like step (norm, GEMM, gate) recorded once replays on new input values.
TEST_F(GpuRuntime, GraphReplayMatchesEagerExecution) {
  const int n = 8, d = 256, f = 512;
  const std::vector<float> w_norm = random(d);
  const std::vector<uint16_t> w_gate = narrowed(DType::BF16, random(size_t(f) * d, -0.1f, 0.1f));
  float* x = poisoned<float>(size_t(n) * d);
  float* xn = poisoned<float>(size_t(n) * d);
  float* gate = poisoned<float>(size_t(n) * f);
  float* up = upload(random(size_t(n) * f));
  const cuda::DeviceMatrix wg{upload(w_gate), DType::BF16, f, d};
  const float* norm = upload(w_norm);
  cuda::Gemm gemm;
  auto step = [&] {
    cuda::rmsnorm(x, norm, xn, n, d, 1e-5f, stream());
    gemm.linear(xn, n, wg, nullptr, gate, false, scratch(), stream());
    cuda::swiglu(gate, up, size_t(n) * f, stream());
  };
  const std::vector<float> input = random(size_t(n) * d);
  cuda::copy_to_device(x, std::span<const float>(input), stream());
  step();
  const std::vector<float> eager = download(gate, size_t(n) * f);

  cuda::Graph graph;
  PHOTON_CUDA_CHECK(cudaMemsetAsync(gate, 0xFF, size_t(n) * f * sizeof(float), stream()));
  graph.capture(stream(), step);
  ASSERT_TRUE(graph.ready());
  const std::vector<float> untouched = download(gate, size_t(n) * f);
  EXPECT_TRUE(std::isnan(untouched[0])) << "recording must not run the work";
  graph.launch(stream());
  EXPECT_EQ(download(gate, size_t(n) * f), eager);

  // New inputs in the same buffers: the replay computes them, like an eager step.
  const std::vector<float> input2 = random(size_t(n) * d);
  cuda::copy_to_device(x, std::span<const float>(input2), stream());
  graph.launch(stream());
  const std::vector<float> replayed = download(gate, size_t(n) * f);
  step();
  EXPECT_EQ(replayed, download(gate, size_t(n) * f));
  EXPECT_NE(replayed, eager);
}

TEST_F(GpuRuntime, AFailedCaptureLeavesTheStreamUsable) {
  cuda::Graph graph;
  EXPECT_THROW(graph.capture(stream(), [] { throw std::runtime_error("recording failed"); }),
               std::runtime_error);
  EXPECT_FALSE(graph.ready());
  EXPECT_EQ(status_of([&] { graph.launch(stream()); }), PHOTON_ERR_INTERNAL);
  const std::vector<float> x = random(2 * 32), w = random(32);
  float* y = poisoned<float>(x.size());
  cuda::rmsnorm(upload(x), upload(w), y, 2, 32, 1e-5f, stream());
  for (float v : download(y, x.size())) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace photon::gpu_test
