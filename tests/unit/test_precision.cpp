// The precision load option (photon_load_options_set_precision): how it is set, refused and
// reported; on the CPU, bf16 precision is defined as the exact products of the input rounded to
// bf16 (the same bits, on every kernel set and weight type); and the shipped trained model at bf16
// precision keeps its perplexity within 1% of exact and its greedy tokens within 90%.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "photon.h"
#include "trained_model_quality.h"

namespace {

using photon::DType;
using photon::Precision;

struct ModelFree {
  void operator()(photon_model* m) const { photon_model_free(m); }
};
using ModelPtr = std::unique_ptr<photon_model, ModelFree>;

ModelPtr load(const std::string& path, const char* precision) {
  photon_load_options* options = nullptr;
  EXPECT_EQ(photon_load_options_create(&options), PHOTON_OK);
  if (precision) {
    EXPECT_EQ(photon_load_options_set_precision(options, precision), PHOTON_OK)
        << photon_last_error();
  }
  photon_model* model = nullptr;
  EXPECT_EQ(photon_model_load(path.c_str(), options, &model), PHOTON_OK) << photon_last_error();
  photon_load_options_free(options);
  return ModelPtr(model);
}

TEST(Precision, IsSetReportedAndRefusedByName) {
  photon_load_options* options = nullptr;
  ASSERT_EQ(photon_load_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_precision(options, "fp8"), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(photon_last_error(), "'fp8'"), nullptr) << photon_last_error();
  EXPECT_NE(std::strstr(photon_last_error(), "exact, bf16"), nullptr) << photon_last_error();
  EXPECT_EQ(photon_load_options_set_precision(options, ""), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_load_options_set_precision(options, nullptr), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_load_options_set_precision(nullptr, "bf16"), PHOTON_ERR_INVALID_ARGUMENT);
  // The device set after the precision keeps it.
  ASSERT_EQ(photon_load_options_set_precision(options, "bf16"), PHOTON_OK);
  ASSERT_EQ(photon_load_options_set_device(options, "cpu"), PHOTON_OK);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(photon::testing::kTrainedModelPath.c_str(), options, &model),
            PHOTON_OK)
      << photon_last_error();
  EXPECT_STREQ(photon_model_precision(model), "bf16");
  photon_model_free(model);
  photon_load_options_free(options);

  EXPECT_STREQ(photon_model_precision(load(photon::testing::kTrainedModelPath, nullptr).get()),
               "exact");
  EXPECT_STREQ(photon_model_precision(load(photon::testing::kTrainedModelPath, "exact").get()),
               "exact");
  EXPECT_STREQ(photon_model_precision(nullptr), "");
}

std::vector<float> random_values(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> download(photon::Backend& b, const photon::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  b.download(out.data(), t);
  return out;
}

// On every kernel set this processor has and every weight type, a bf16-precision backend's linear
// and linear_group give the bits that an exact backend gives for the input rounded to bf16.
TEST(Precision, Bf16ProductsAreExactProductsOfTheRoundedInput) {
  std::mt19937 rng(7);
  const int64_t rows = 37, in = 64, out = 24;
  const std::vector<float> x = random_values(rng, rows * in);
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = photon::bf16_to_f32(photon::f32_to_bf16(x[i]));
  ASSERT_NE(rounded, x);
  for (const auto kernels : {photon::cpu::CpuKernels::Portable, photon::cpu::CpuKernels::Avx2,
                             photon::cpu::CpuKernels::Avx512}) {
    if (!photon::cpu::cpu_kernels_available(kernels)) continue;
    photon::cpu::CpuBackend bf16(1, kernels, Precision::Bf16), exact(1, kernels, Precision::Exact);
    EXPECT_EQ(bf16.precision(), Precision::Bf16);
    for (const DType dtype : {DType::F32, DType::BF16, DType::F16, DType::Q8}) {
      SCOPED_TRACE(std::string(photon::dtype_name(dtype)) + " weights, " +
                   photon::cpu::cpu_kernels_name(kernels));
      const std::vector<float> values = random_values(rng, out * in);
      std::vector<uint8_t> stored(photon::dtype_bytes(dtype, values.size()));
      photon::convert_from_f32(dtype, values.data(), stored.data(), values.size());
      const photon::HostWeight source{stored.data(), dtype, out, in};
      auto run = [&](photon::Backend& b, const std::vector<float>& input) {
        const photon::Tensor w = b.weight(source, "w");
        const photon::Matrix xs = photon::new_matrix(b, rows, in, "x");
        const photon::Matrix y = photon::new_matrix(b, rows, out, "y");
        const photon::Matrix y2 = photon::new_matrix(b, rows, out, "y2");
        b.upload(xs, input.data());
        b.linear(xs, w, nullptr, y, false);
        const std::vector<photon::LinearOut> group = {{w, y2, false}};
        b.linear_group(xs, group);
        std::vector<float> both = download(b, y);
        const std::vector<float> second = download(b, y2);
        both.insert(both.end(), second.begin(), second.end());
        return both;
      };
      const std::vector<float> got = run(bf16, x), want = run(exact, rounded);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      EXPECT_NE(run(exact, x), want) << "rounding the input changed nothing";
    }
  }
}

// The quality bounds of bf16 precision (docs/quality.md): the shipped model's perplexity of a held
// passage within 1% of exact's, and greedy tokens equal at >= 90% of 64 positions after each of 20
// prompts.
TEST(Precision, Bf16KeepsTheTrainedModelsQuality) {
  const ModelPtr exact = load(photon::testing::kTrainedModelPath, "exact");
  const ModelPtr bf16 = load(photon::testing::kTrainedModelPath, "bf16");
  const auto [want, got] =
      photon::testing::expect_quality_of(exact.get(), bf16.get(), "exact, bf16");
  EXPECT_NE(got, want) << "bf16 precision computed the exact log-probabilities";
}

}  // namespace
