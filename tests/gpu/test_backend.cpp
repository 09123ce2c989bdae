// What only the CUDA backend has, through the Backend interface (its ops are compared with the
// CPU's by the per-op test, test_cuda_backends.cpp): device memory that stays flat over allocation
// cycles, running out of device memory as a status after which the backend goes on, and the
// attention kernels' head size limit.
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

using GpuBackend = GpuBackendTest;

// Buffers go back to the backend's pool and are used again: a thousand cycles of the sizes a
// session allocates leave the device's free memory where the first cycle left it.
TEST_F(GpuBackend, DeviceMemoryStaysFlatOverAllocationCycles) {
  auto cycle = [&] {
    std::vector<Matrix> held;
    for (int64_t rows : {1, 7, 4096, 130, 1 << 16})
      held.push_back(new_matrix(backend(), rows, 64, "x"));
  };
  cycle();
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  for (int i = 0; i < 1000; ++i) cycle();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(free_after + (size_t{2} << 20), free_before);
}

TEST_F(GpuBackend, OutOfMemoryIsAStatusAndTheBackendGoesOn) {
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  try {
    backend().allocate(2 * total, "more than the device has");
    FAIL() << "allocating twice the device's memory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), PHOTON_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(e.what()).find("more than the device has"), std::string::npos)
        << e.what();
  }
  // The failure is not sticky: allocation and ops still work.
  const int n = 4, d = 64;
  const std::vector<float> ones(size_t(n) * d, 1.0f);
  const Matrix x = new_matrix(backend(), n, d, "x"), y = new_matrix(backend(), n, d, "y");
  backend().upload(x, ones.data());
  backend().rmsnorm(x, backend().weight({ones.data(), DType::F32, 1, d}, "norm"), y, 0.0f);
  std::vector<float> out(ones.size(), NAN);
  backend().download(out.data(), y);
  for (float v : out) ASSERT_EQ(v, 1.0f);
}

// Within the op contract, beyond the kernels: more than 256 values per head.
TEST_F(GpuBackend, AttentionBeyondTheKernelsHeadSizeIsUnsupported) {
  const AttentionShape shape{2, 1, 512};
  const Matrix q = new_matrix(backend(), 1, shape.q_dim(), "q");
  const Matrix out = new_matrix(backend(), 1, shape.q_dim(), "out");
  const Matrix k = new_matrix(backend(), 1, shape.kv_dim(), "k");
  const Matrix v = new_matrix(backend(), 1, shape.kv_dim(), "v");
  try {
    backend().attention(q, shape, std::vector<AttentionSegment>{{0, 1, 0, k, v}}, out);
    FAIL() << "attention with 512 values per head was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), PHOTON_ERR_UNSUPPORTED) << e.what();
  }
}

}  // namespace
}  // namespace photon::gpu_test
