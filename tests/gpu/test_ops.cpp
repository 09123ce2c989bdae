// Elementwise and row ops on the device against their CPU counterparts in src/backend/cpu: RMSNorm,
// RoPE, SwiGLU, embedding gather, storage conversion and the linear chunker.
#include "backend/cpu/linear.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/swiglu.h"
#include "backend/cuda/chunker.h"
#include "backend/cuda/convert.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/swiglu.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

using GpuOps = GpuTest;

TEST_F(GpuOps, RmsNormMatchesCpu) {
  // Widths of a stack (1664), a chunker norm (4 x 1664), and odd small ones.
  for (const auto& [n, d] : {std::pair{1, 1664}, {37, 6656}, {300, 13}, {5, 1}}) {
    SCOPED_TRACE("n " + std::to_string(n) + ", d " + std::to_string(d));
    const std::vector<float> x = random(size_t(n) * d, -3.0f, 3.0f), w = random(d);
    std::vector<float> ref(x.size());
    cpu::rmsnorm(x.data(), w.data(), ref.data(), n, d, 1e-5f);
    float* y = poisoned<float>(x.size());
    cuda::rmsnorm(upload(x), upload(w), y, n, d, 1e-5f, stream());
    EXPECT_LT(relative_error(download(y, x.size()), ref), kF32Bound);
    // In place, as the stack's final norm runs.
    float* xy = upload(x);
    cuda::rmsnorm(xy, upload(w), xy, n, d, 1e-5f, stream());
    EXPECT_LT(relative_error(download(xy, x.size()), ref), kF32Bound);
  }
}

TEST_F(GpuOps, RopeTableMatchesCpuDoublePrecisionTable) {
  const int n = 257, head_dim = 52;
  std::vector<int64_t> positions(n);
  for (int64_t& p : positions) p = uniform_int(0, 1 << 20);  // far past any context: angles large
  positions[0] = 0;
  const int half = head_dim / 2;
  std::vector<float> table(2 * size_t(n) * half);  // cos rows, then sin rows
  cpu::rope_table(positions.data(), n, head_dim, 10000.0f, table.data());
  const float* table_cos = table.data();
  const float* table_sin = table.data() + size_t(n) * half;
  float* cos = poisoned<float>(size_t(n) * half);
  float* sin = poisoned<float>(size_t(n) * half);
  cuda::rope_table(upload(positions), n, upload(cuda::rope_inv_freq(head_dim, 10000.0f)), half, cos,
                   sin, stream());
  const std::vector<float> c = download(cos, size_t(n) * half), s = download(sin, size_t(n) * half);
  // Equal to the CPU's up to one f32 ulp where the double lies next to a rounding boundary.
  int differing = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_TRUE(std::isfinite(c[i]) && std::isfinite(s[i]));
    EXPECT_LE(std::fabs(c[i] - table_cos[i]), 6e-8f) << i;
    EXPECT_LE(std::fabs(s[i] - table_sin[i]), 6e-8f) << i;
    differing += c[i] != table_cos[i] || s[i] != table_sin[i];
  }
  EXPECT_LE(differing, static_cast<int>(c.size() / 100));
}

TEST_F(GpuOps, RopeApplyMatchesCpu) {
  const int n = 45, heads = 6, head_dim = 64;
  std::vector<int64_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = 3 + i;
  const size_t half = head_dim / 2;
  std::vector<float> table(2 * n * half);  // cos rows, then sin rows
  cpu::rope_table(positions.data(), n, head_dim, 10000.0f, table.data());
  const std::vector<float> x = random(size_t(n) * heads * head_dim);
  std::vector<float> ref = x;
  cpu::rope_apply(ref.data(), n, heads, head_dim, table.data());
  float* xd = upload(x);
  const std::vector<float> cos(table.begin(), table.begin() + n * half),
      sin(table.begin() + n * half, table.end());
  cuda::rope_apply(xd, n, heads, head_dim, upload(cos), upload(sin), stream());
  EXPECT_LT(relative_error(download(xd, x.size()), ref), kF32Bound);
}

TEST_F(GpuOps, SwiGluMatchesCpu) {
  const size_t n = 3 * 4096 + 7;
  const std::vector<float> gate = random(n, -8.0f, 8.0f), up = random(n);
  std::vector<float> ref = gate;
  cpu::swiglu(ref.data(), up.data(), n);
  float* g = upload(gate);
  cuda::swiglu(g, upload(up), n, stream());
  EXPECT_LT(relative_error(download(g, n), ref), kF32Bound);
}

TEST_F(GpuOps, EmbeddingGathersExactRowsOfEveryStorageType) {
  const int rows = 1000, dim = 416, n = 67;
  const std::vector<float> table = random(size_t(rows) * dim, -2.0f, 2.0f);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = uniform_int(0, rows - 1);
  ids[0] = rows - 1;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> widened = table;
    const void* device_table = nullptr;
    if (dtype == DType::F32) {
      device_table = upload(table);
    } else {
      widened = rounded_through(dtype, table);
      device_table = upload(narrowed(dtype, table));
    }
    float* out = poisoned<float>(size_t(n) * dim);
    cuda::embedding(device_table, dtype, rows, dim, upload(ids), n, out, stream());
    const std::vector<float> got = download(out, size_t(n) * dim);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(0, std::memcmp(&got[size_t(i) * dim], &widened[size_t(ids[i]) * dim],
                               dim * sizeof(float)))
          << "row " << i;
  }
  // An id outside the table gives NaN, never another row.
  const std::vector<int32_t> bad = {-1, rows};
  float* out = poisoned<float>(size_t(2) * dim);
  PHOTON_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(2) * dim * sizeof(float), stream()));
  cuda::embedding(upload(table), DType::F32, rows, dim, upload(bad), 2, out, stream());
  for (float v : download(out, size_t(2) * dim)) ASSERT_TRUE(std::isnan(v));
}

TEST_F(GpuOps, ConversionRoundsLikeTheCpu) {
  std::vector<float> x = random(100003, -1000.0f, 1000.0f);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = 65504.0f, x[4] = 1e6f;  // zero, subnormal, edges
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    uint16_t* narrow = poisoned<uint16_t>(x.size());
    cuda::convert_from_f32(dtype, upload(x), narrow, x.size(), stream());
    EXPECT_EQ(download(narrow, x.size()), narrowed(dtype, x));
    float* wide = poisoned<float>(x.size());
    cuda::convert_to_f32(dtype, narrow, wide, x.size(), stream());
    const std::vector<float> got = download(wide, x.size()), want = rounded_through(dtype, x);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  }
}

TEST_F(GpuOps, LinearChunkerMatchesCpuNormAndProjection) {
  // photon-600m level 2: C = 4 children of width 1664 -> D = 1664, bf16 weights.
  const int m = 9, width = 4 * 416, out_dim = 416;
  const std::vector<float> a = random(size_t(m) * width, -2.0f, 2.0f), norm = random(width);
  const std::vector<float> proj = random(size_t(out_dim) * width, -0.05f, 0.05f);
  const std::vector<float> bias = random(out_dim);
  const std::vector<float> proj_bf16 = rounded_through(DType::BF16, proj);
  std::vector<float> normed(a.size()), ref(size_t(m) * out_dim);
  cpu::rmsnorm(a.data(), norm.data(), normed.data(), m, width, 1e-5f);
  cpu::linear(normed.data(), m, width, proj_bf16.data(), out_dim, bias.data(), ref.data());
  cuda::Gemm gemm;
  float* out = poisoned<float>(ref.size());
  cuda::chunker_linear(gemm, upload(a), m, width, upload(norm), 1e-5f,
                       {upload(narrowed(DType::BF16, proj)), DType::BF16, out_dim, width},
                       upload(bias), out, scratch(), stream());
  EXPECT_LT(relative_error(download(out, ref.size()), ref), kTwoTermBound);
}

}  // namespace
}  // namespace photon::gpu_test
