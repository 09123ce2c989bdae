// The precision load option (photon_load_options_set_precision): how it is set, refused and
// reported; on the CPU, bf16 precision is defined as the exact products of the input rounded to
// bf16 (the same bits, on every kernel set and weight type, but bf16 weights with AVX512-BF16's dot
// products: within f32 rounding), int8 precision as the products of the
// input quantized per block (quantize_int8.h) with q8 weights (the same bits on every kernel set,
// within f32 rounding of the float64 product); and the shipped trained model at bf16 and int8
// precision keeps its perplexity within 1% of exact and its greedy tokens within 90%.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quantize_int8.h"
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

// int8 is the CPU's: "auto" chooses the CPU for it, "cuda" refuses it before looking for a GPU.
TEST(Precision, Int8IsTheCpusOnly) {
  photon_load_options* options = nullptr;
  ASSERT_EQ(photon_load_options_create(&options), PHOTON_OK);
  ASSERT_EQ(photon_load_options_set_precision(options, "int8"), PHOTON_OK);
  ASSERT_EQ(photon_load_options_set_device(options, "auto"), PHOTON_OK);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(photon::testing::kTrainedModelPath.c_str(), options, &model),
            PHOTON_OK)
      << photon_last_error();
  EXPECT_STREQ(photon_model_device(model), "cpu");
  EXPECT_STREQ(photon_model_precision(model), "int8");
  photon_model_free(model);
  model = nullptr;
  ASSERT_EQ(photon_load_options_set_device(options, "cuda"), PHOTON_OK);
  EXPECT_EQ(photon_model_load(photon::testing::kTrainedModelPath.c_str(), options, &model),
            PHOTON_ERR_UNSUPPORTED);
  EXPECT_NE(std::strstr(photon_last_error(), "int8"), nullptr) << photon_last_error();
  EXPECT_EQ(model, nullptr);
  photon_load_options_free(options);
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

// linear's result for x[rows, in] with the weight `source`, then linear_group's, one after the
// other.
std::vector<float> linear_and_group(photon::Backend& b, const photon::HostWeight& source,
                                    int64_t rows, const std::vector<float>& x) {
  const photon::Tensor w = b.weight(source, "w");
  const photon::Matrix xs = photon::new_matrix(b, rows, source.cols, "x");
  const photon::Matrix y = photon::new_matrix(b, rows, source.rows, "y");
  const photon::Matrix y2 = photon::new_matrix(b, rows, source.rows, "y2");
  b.upload(xs, x.data());
  b.linear(xs, w, nullptr, y, false);
  const std::vector<photon::LinearOut> group = {{w, y2, false}};
  b.linear_group(xs, group);
  std::vector<float> both = download(b, y);
  const std::vector<float> second = download(b, y2);
  both.insert(both.end(), second.begin(), second.end());
  return both;
}

// On every kernel set this processor has and every weight type, a bf16-precision backend's linear
// and linear_group give the bits that an exact backend gives for the input rounded to bf16; but
// bf16 weights on a set with a bf16 dot product (AVX-512 where the processor runs AVX512-BF16's
// fast), whose order differs, give the float64 product of the rounded input within f32 rounding,
// the same bits in linear and linear_group.
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
        return linear_and_group(b, source, rows, input);
      };
      const std::vector<float> got = run(bf16, x), want = run(exact, rounded);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_NE(run(exact, x), want) << "rounding the input changed nothing";
      if (dtype == DType::BF16 && kernels == photon::cpu::CpuKernels::Avx512 &&
          photon::cpu::cpu_has_fast_bf16_dot()) {
        std::vector<float> w(values.size());
        photon::convert_to_f32(dtype, stored.data(), w.data(), w.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < out; ++o) {
            double product = 0, magnitude = 0;
            for (int64_t k = 0; k < in; ++k) {
              const double term = double(rounded[r * in + k]) * w[o * in + k];
              product += term;
              magnitude += std::fabs(term);
            }
            EXPECT_NEAR(got[r * out + o], product, 1e-6 * magnitude) << "row " << r << ", " << o;
            EXPECT_EQ(got[(rows + r) * out + o], got[r * out + o]) << "linear_group, row " << r;
          }
        continue;
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
  }
}

// Blocks of 32: the scale max |x| / 127, values rounded to nearest (ties to even) within
// [-127, 127]; zeros (and values too small for a scale) give d = 0, a non-finite value d = NaN.
TEST(Precision, Int8QuantizesEachBlockByItsLargestValue) {
  std::vector<float> x(6 * 32, 0.0f);
  const float nan = std::nanf("");
  x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = 126.6f, x[5] = 0.49f;
  x[6] = -0.5f, x[7] = -1.5f;
  x[64] = nan, x[65] = 1.0f;
  x[96] = INFINITY;
  x[128] = -254.0f, x[129] = 5.0f, x[130] = 7.0f, x[131] = 253.0f;
  x[160] = 1e-44f, x[161] = -1e-44f;  // max / 127 underflows to 0
  std::vector<int8_t> q(x.size());
  std::vector<float> d(x.size() / 32);
  photon::cpu::quantize_int8(x.data(), 6, 32, q.data(), d.data());
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(std::vector<int>(q.begin(), q.begin() + 9),
            (std::vector<int>{127, 2, 4, -2, 127, 0, 0, -2, 0}));
  EXPECT_EQ(d[1], 0.0f);
  EXPECT_EQ(std::count(q.begin() + 32, q.begin() + 64, 0), 32);
  EXPECT_TRUE(std::isnan(d[2]));
  EXPECT_TRUE(std::isnan(d[3]));
  EXPECT_EQ(std::count(q.begin() + 64, q.begin() + 128, 0), 64);
  EXPECT_EQ(d[4], 2.0f);
  EXPECT_EQ(std::vector<int>(q.begin() + 128, q.begin() + 133),
            (std::vector<int>{-127, 2, 4, 126, 0}));
  EXPECT_EQ(d[5], 0.0f);
  EXPECT_EQ(std::count(q.begin() + 160, q.end(), 0), 32);
}

// On every kernel set: a q8 product at int8 precision is the product of the quantized input and
// the q8 values, within f32 rounding of its float64 value, with the same bits on every set (one
// row and many, linear and linear_group); a product with other weights is the exact one.
TEST(Precision, Int8ProductsAreProductsOfTheQuantizedInput) {
  std::mt19937 rng(11);
  const int64_t in = 96, out = 24;
  const std::vector<float> wv = random_values(rng, out * in);
  std::vector<uint8_t> q8(photon::dtype_bytes(DType::Q8, wv.size()));
  std::vector<uint8_t> f16(photon::dtype_bytes(DType::F16, wv.size()));
  photon::convert_from_f32(DType::Q8, wv.data(), q8.data(), wv.size());
  photon::convert_from_f32(DType::F16, wv.data(), f16.data(), wv.size());
  std::vector<float> w(wv.size());
  photon::convert_to_f32(DType::Q8, q8.data(), w.data(), w.size());
  for (const int64_t rows : {int64_t{1}, int64_t{37}}) {
    std::vector<float> x = random_values(rng, rows * in);
    for (int64_t k = 0; k < in; ++k) x[k] *= 1e-3f;  // blocks of very different scales
    std::vector<int8_t> xq(x.size());
    std::vector<float> xd(x.size() / 32);
    photon::cpu::quantize_int8(x.data(), rows, in, xq.data(), xd.data());
    std::vector<float> first;
    for (const auto kernels : {photon::cpu::CpuKernels::Portable, photon::cpu::CpuKernels::Avx2,
                               photon::cpu::CpuKernels::Avx512}) {
      if (!photon::cpu::cpu_kernels_available(kernels)) continue;
      SCOPED_TRACE(std::to_string(rows) + " rows, " + photon::cpu::cpu_kernels_name(kernels));
      photon::cpu::CpuBackend int8(1, kernels, Precision::Int8), exact(1, kernels);
      auto run = [&](photon::Backend& b, const std::vector<uint8_t>& stored, DType dtype) {
        return linear_and_group(b, {stored.data(), dtype, out, in}, rows, x);
      };
      const std::vector<float> got = run(int8, q8, DType::Q8);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double want = 0, magnitude = 0;
          for (int64_t k = 0; k < in; ++k) {
            const double term = double(xd[(r * in + k) / 32]) * xq[r * in + k] * w[o * in + k];
            want += term;
            magnitude += std::fabs(term);
          }
          const float y = got[r * out + o];
          EXPECT_NEAR(y, want, 1e-6 * magnitude) << "row " << r << ", output " << o;
          EXPECT_EQ(got[(rows + r) * out + o], y) << "linear_group, row " << r << ", output " << o;
        }
      if (first.empty())
        first = got;
      else
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0);
      EXPECT_NE(got, run(exact, q8, DType::Q8)) << "the input was not quantized";
      EXPECT_EQ(run(int8, f16, DType::F16), run(exact, f16, DType::F16));
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

// The same bounds for int8 precision, on the shipped model stored in q8 (against exact on that
// file).
TEST(Precision, Int8KeepsTheTrainedModelsQuality) {
  const std::string q8 = std::string(PHOTON_BINARY_DIR) + "/test_precision_int8_" +
                         std::to_string(getpid()) + ".photon";
  photon_write_options* options = nullptr;
  ASSERT_EQ(photon_write_options_create(&options), PHOTON_OK);
  ASSERT_EQ(photon_write_options_set_dtype(options, PHOTON_DTYPE_Q8), PHOTON_OK);
  ASSERT_EQ(photon_model_convert_from(photon::testing::kTrainedModelPath.c_str(), nullptr,
                                      q8.c_str(), options),
            PHOTON_OK)
      << photon_last_error();
  photon_write_options_free(options);
  const ModelPtr exact = load(q8, "exact");
  const ModelPtr int8 = load(q8, "int8");
  std::remove(q8.c_str());
  const auto [want, got] =
      photon::testing::expect_quality_of(exact.get(), int8.get(), "q8 exact, int8");
  EXPECT_NE(got, want) << "int8 precision computed the exact log-probabilities";
}

}  // namespace
