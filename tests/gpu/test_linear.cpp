// Linear layers through cuBLASLt against cpu::linear: bf16 / f16 weights with two-term
// activations and f32 accumulation, f32 weights through TF32; bias, accumulation, unaligned
// operands, prompts split into several GEMMs.
#include "backend/cpu/linear.h"
#include "backend/cuda/linear.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

using GpuLinear = GpuTest;

struct Case {
  int n, in, out;
  bool bias, accumulate;
};

TEST_F(GpuLinear, SixteenBitWeightsMatchCpuOnF32Activations) {
  cuda::Gemm gemm;
  // Decode rows (1, 4), window batches, prefill; stack, FFN, chunker and LM-head-like shapes;
  // in = 52 leaves 16-bit rows only 8-byte aligned; 1000 rows of an LM head are several GEMMs.
  const Case cases[] = {{1, 1664, 4096, false, false}, {4, 4096, 1664, false, true},
                        {33, 416, 1664, true, false},  {200, 1664, 3000, false, false},
                        {7, 52, 96, true, true},       {1, 1664, 32000, false, false},
                        {1000, 416, 32000, true, true}};
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(c.n) + " in " +
                   std::to_string(c.in) + " out " + std::to_string(c.out));
      const std::vector<float> x = random(size_t(c.n) * c.in, -2.0f, 2.0f);
      const std::vector<float> w = random(size_t(c.out) * c.in, -0.05f, 0.05f);
      const std::vector<float> bias = random(c.out), y0 = random(size_t(c.n) * c.out);
      std::vector<float> ref = y0;
      cpu::linear(x.data(), c.n, c.in, rounded_through(dtype, w).data(), c.out,
                  c.bias ? bias.data() : nullptr, ref.data(), c.accumulate);
      float* y = c.accumulate ? upload(y0) : poisoned<float>(y0.size());
      gemm.linear(upload(x), c.n, {upload(narrowed(dtype, w)), dtype, c.out, c.in},
                  c.bias ? upload(bias) : nullptr, y, c.accumulate, scratch(), stream());
      EXPECT_LT(relative_error(download(y, y0.size()), ref), kTwoTermBound);
    }
  }
}

// One input, several matrices (Q, K, V): x split once; each output as the CPU's own product, on
// the stacked path (1, 33 rows) and the two-GEMM path (300 rows).
TEST_F(GpuLinear, GroupOfProductsMatchesCpu) {
  cuda::Gemm gemm;
  const int in = 416;
  for (int n : {1, 33, 300}) {
    const std::vector<float> x = random(size_t(n) * in, -2.0f, 2.0f);
    std::vector<cuda::GemmProduct> products;
    std::vector<std::vector<float>> refs;
    std::vector<float*> outputs;
    for (int out : {416, 104, 1664}) {
      const std::vector<float> w = random(size_t(out) * in, -0.05f, 0.05f);
      refs.emplace_back(size_t(n) * out);
      cpu::linear(x.data(), n, in, rounded_through(DType::BF16, w).data(), out, nullptr,
                  refs.back().data());
      outputs.push_back(poisoned<float>(refs.back().size()));
      products.push_back({{upload(narrowed(DType::BF16, w)), DType::BF16, out, in},
                          nullptr,
                          outputs.back(),
                          false});
    }
    gemm.linear_group(upload(x), n, products, scratch(), stream());
    for (size_t i = 0; i < refs.size(); ++i)
      EXPECT_LT(relative_error(download(outputs[i], refs[i].size()), refs[i]), kTwoTermBound)
          << "n " << n << ", product " << i;
  }
}

TEST_F(GpuLinear, F32WeightsUseTf32) {
  cuda::Gemm gemm;
  for (const Case& c : {Case{3, 1664, 1664, true, false}, Case{64, 512, 768, false, true}}) {
    const std::vector<float> x = random(size_t(c.n) * c.in), w = random(size_t(c.out) * c.in);
    const std::vector<float> bias = random(c.out), y0 = random(size_t(c.n) * c.out);
    std::vector<float> ref = y0;
    cpu::linear(x.data(), c.n, c.in, w.data(), c.out, c.bias ? bias.data() : nullptr, ref.data(),
                c.accumulate);
    float* y = c.accumulate ? upload(y0) : poisoned<float>(y0.size());
    gemm.linear(upload(x), c.n, {upload(w), DType::F32, c.out, c.in},
                c.bias ? upload(bias) : nullptr, y, c.accumulate, scratch(), stream());
    EXPECT_LT(relative_error(download(y, y0.size()), ref), kTf32Bound);
  }
}

TEST_F(GpuLinear, PlansAreReusedAndUnalignedOperandsWork) {
  cuda::Gemm gemm;
  const int n = 5, in = 256, out = 384;
  const std::vector<float> x = random(size_t(n + 1) * in), w = random(size_t(out) * in);
  const std::vector<uint16_t> w16 = narrowed(DType::BF16, w);
  const uint16_t* wd = upload(w16);
  float* xd = upload(x);
  float* y = poisoned<float>(size_t(n + 1) * out);
  gemm.linear(xd, n, {wd, DType::BF16, out, in}, nullptr, y, false, scratch(), stream());
  gemm.linear(xd, n, {wd, DType::BF16, out, in}, nullptr, y, false, scratch(), stream());
  EXPECT_EQ(gemm.plans(), 1u);
  // Weights starting 4 values in (8-byte aligned) and an output one value in (4-byte aligned).
  const std::vector<float> w_rows(w.begin() + 4, w.begin() + 4 + size_t(out - 1) * in);
  std::vector<float> ref(size_t(n) * (out - 1));
  cpu::linear(x.data(), n, in, rounded_through(DType::BF16, w_rows).data(), out - 1, nullptr,
              ref.data());
  gemm.linear(xd, n, {wd + 4, DType::BF16, out - 1, in}, nullptr, y + 1, false, scratch(),
              stream());
  EXPECT_EQ(gemm.plans(), 2u);
  const std::vector<float> got = download(y + 1, ref.size());
  EXPECT_LT(relative_error(got, ref), kTwoTermBound);
}

}  // namespace
}  // namespace photon::gpu_test
