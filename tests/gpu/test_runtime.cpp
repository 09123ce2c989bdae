// The CUDA backend's device runtime: errors instead of aborts (also without a device), the device's
// description, the scratch arena, and the attention kernels' choice of key splits.
#include <cstdint>
#include <functional>

#include "backend/cuda/attention.h"
#include "backend/cuda/buffer.h"
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
  const cuda::Device device(0);
  EXPECT_FALSE(device.info().name.empty());
  EXPECT_GE(device.info().major, 8);
  EXPECT_GT(device.info().multiprocessors, 0);
  EXPECT_GT(device.info().memory_bytes, size_t{1} << 30);
  EXPECT_EQ(status_of([] { cuda::Device other(1 << 20); }), PHOTON_ERR_DEVICE);
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
    EXPECT_GT(arena.mark(), mark);
  }
  EXPECT_EQ(arena.mark(), mark);
  EXPECT_EQ(status_of([&] { arena.take_bytes(size_t{2} << 20, "too much"); }),
            PHOTON_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(arena.mark(), mark);  // a refused piece takes nothing
}

// The row kernel splits a row's keys over blocks only where one launch would leave the device
// idle: long rows, few of them. Runs everywhere (a host function).
TEST(GpuKernels, AttentionSplitsOnlyLongRowsOfSmallLaunches) {
  EXPECT_EQ(cuda::attention_splits(1, 32, 4, 132), 1);        // a window: never split
  EXPECT_GT(cuda::attention_splits(1, 32, 2000, 132), 1);     // one long row: split
  EXPECT_EQ(cuda::attention_splits(4096, 32, 2000, 132), 1);  // a full grid already
}

}  // namespace
}  // namespace photon::gpu_test
