// bf16, f16 and q8 models are computed in place, in their stored type: against the f32 engine on
// the same model (log-probabilities within the weights' rounding), against an f32 file holding
// exactly the stored values (the same bits: widening is exact, q8's d * q too), and in memory (no
// f32 copy of the weights).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "photon.h"
#include "test_models.h"

namespace {

using photon::DType;

struct Outputs {
  std::vector<float> scores;    // teacher-forced log-probabilities (many rows: the GEMM path)
  std::vector<int32_t> tokens;  // sampled continuation (one row per step: the skinny kernels)
  std::vector<float> logprobs;
};

int collect(void* user, int32_t token, const char*, size_t, float logprob) {
  auto* run = static_cast<Outputs*>(user);
  run->tokens.push_back(token);
  run->logprobs.push_back(logprob);
  return 0;
}

class WeightDTypes : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else PHOTON levels.
  photon::ModelConfig config() const {
    return GetParam() == 0 ? photon::testing::tiny_vanilla()
                           : photon::testing::tiny_photon(GetParam());
  }
  // Per process: ctest runs the tests of this suite side by side.
  std::string file(const std::string& name) const {
    return std::string(PHOTON_BINARY_DIR) + "/test_dtypes_" + std::to_string(getpid()) + "_" +
           std::to_string(GetParam()) + "_" + name + ".photon";
  }

  // Scores a fixed sequence and samples a continuation of its first 40 tokens.
  Outputs run(const std::string& path) const {
    photon_model* model = nullptr;
    EXPECT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
    Outputs r;
    if (!model) return r;
    std::vector<int32_t> sequence;
    for (int i = 0; i < 120; ++i) sequence.push_back(i == 0 ? 1 : 3 + (i * 53 + 7) % 500);
    r.scores.resize(sequence.size());
    EXPECT_EQ(photon_model_score(model, sequence.data(), sequence.size(), r.scores.data()),
              PHOTON_OK)
        << photon_last_error();
    r.scores.erase(r.scores.begin());  // NaN: the first token is not predicted
    photon_session_options* o = nullptr;
    photon_session_options_create(&o);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session_options_set_temperature(o, 0.8f);
    photon_session_options_set_seed(o, 5);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    EXPECT_EQ(photon_session_prefill(s, sequence.data(), 40), PHOTON_OK) << photon_last_error();
    EXPECT_EQ(photon_session_generate(s, 24, collect, &r, nullptr), PHOTON_OK)
        << photon_last_error();
    photon_session_free(s);
    photon_model_free(model);
    return r;
  }
};

TEST_P(WeightDTypes, NarrowFilesGiveTheBitsOfTheirValuesInF32) {
  for (DType dtype : {DType::BF16, DType::F16, DType::Q8}) {
    const std::string narrow = file(photon::dtype_name(dtype)), wide = file("f32-of-narrow");
    photon::testing::write_test_model(config(), narrow, 11, dtype);
    photon::testing::write_test_model(config(), wide, 11, DType::F32, dtype);
    const Outputs a = run(narrow), b = run(wide);
    EXPECT_EQ(a.scores, b.scores) << photon::dtype_name(dtype);
    EXPECT_EQ(a.tokens, b.tokens) << photon::dtype_name(dtype);
    EXPECT_EQ(a.logprobs, b.logprobs) << photon::dtype_name(dtype);
    std::remove(narrow.c_str());
    std::remove(wide.c_str());
  }
}

TEST_P(WeightDTypes, NarrowFilesMatchTheF32EngineWithinTheirRounding) {
  const std::string f32 = file("f32");
  photon::testing::write_test_model(config(), f32, 12);
  const Outputs reference = run(f32);
  // Rounding the weights (relative error u: 2^-9 for bf16, 2^-12 for f16; q8's step is 1/127 of
  // its block's largest value, u = 2^-8) moves these models' log-probabilities (logits of std ~6)
  // by up to about 60 u; allowed: 128 u. The finer f16 must also stay closer than bf16, as
  // rounding (and not a fault) predicts.
  const DType types[] = {DType::BF16, DType::F16, DType::Q8};
  double worst_of[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const DType dtype = types[i];
    const double u = std::ldexp(1.0, dtype == DType::BF16 ? -9 : dtype == DType::F16 ? -12 : -8);
    const std::string path = file(photon::dtype_name(dtype));
    photon::testing::write_test_model(config(), path, 12, dtype);
    const Outputs got = run(path);
    ASSERT_EQ(got.scores.size(), reference.scores.size());
    for (size_t k = 0; k < got.scores.size(); ++k)
      worst_of[i] = std::max(worst_of[i], std::fabs(double(got.scores[k]) - reference.scores[k]));
    EXPECT_LE(worst_of[i], 128 * u) << photon::dtype_name(dtype);
    std::printf("%s: worst |logprob - f32's| %.3g = %.1f u\n", photon::dtype_name(dtype),
                worst_of[i], worst_of[i] / u);
    std::remove(path.c_str());
  }
  EXPECT_LT(worst_of[1], worst_of[0]);
  std::remove(f32.c_str());
}

// photon convert --from M.photon: a model file stored again in q8 holds what a file written in q8
// from the same weights holds (the same bits through the engine), and names its source.
TEST_P(WeightDTypes, AModelFileConvertedToQ8HoldsWhatQ8Stores) {
  const std::string source = file("source"), q8 = file("q8-of-source"), wide = file("f32-of-q8");
  photon::testing::write_test_model(config(), source, 14);
  photon::testing::write_test_model(config(), wide, 14, DType::F32, DType::Q8);
  photon_write_options* options = nullptr;
  ASSERT_EQ(photon_write_options_create(&options), PHOTON_OK);
  ASSERT_EQ(photon_write_options_set_dtype(options, PHOTON_DTYPE_Q8), PHOTON_OK);
  ASSERT_EQ(photon_model_convert_from(source.c_str(), nullptr, q8.c_str(), options), PHOTON_OK)
      << photon_last_error();
  EXPECT_EQ(photon_model_convert_from(source.c_str(), "config.json", q8.c_str(), options),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("is a model file"), std::string::npos)
      << photon_last_error();
  photon_write_options_free(options);

  const Outputs a = run(q8), b = run(wide);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(q8.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  size_t q8_tensors = 0;
  for (size_t i = 0; i < photon_model_tensor_count(model); ++i) {
    photon_dtype dtype = PHOTON_DTYPE_F32;
    ASSERT_EQ(
        photon_model_tensor_info(model, i, nullptr, &dtype, nullptr, nullptr, nullptr, nullptr),
        PHOTON_OK);
    q8_tensors += dtype == PHOTON_DTYPE_Q8;
  }
  EXPECT_GT(q8_tensors, 0u);
  std::string source_name;
  for (size_t i = 0; i < photon_model_metadata_count(model); ++i) {
    const char *key = nullptr, *value = nullptr;
    ASSERT_EQ(photon_model_metadata_at(model, i, &key, &value), PHOTON_OK);
    if (std::string(key) == "source") source_name = value;
  }
  EXPECT_EQ(source_name, source.substr(source.rfind('/') + 1));
  photon_model_free(model);
  for (const std::string& path : {source, q8, wide}) std::remove(path.c_str());
}

std::string model_name(const ::testing::TestParamInfo<int>& param) {
  return param.param == 0 ? std::string("vanilla") : "photon_l" + std::to_string(param.param);
}

INSTANTIATE_TEST_SUITE_P(Models, WeightDTypes, ::testing::Values(0, 2), model_name);

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 20, '\n');
  }
  return -1;
}

// Whether this build runs under AddressSanitizer, which pads every allocation and keeps freed
// memory in quarantine: resident memory then measures the sanitizer, not the engine.
constexpr bool kAddressSanitizer =
#if defined(__SANITIZE_ADDRESS__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

class WeightMemory : public ::testing::TestWithParam<DType> {};

TEST_P(WeightMemory, AModelIsNotCopiedToF32) {
  if (kAddressSanitizer) GTEST_SKIP() << "resident memory under AddressSanitizer";
  // A vanilla model of 29 M parameters, 58 MB in bf16 (31 MB in q8): an f32 copy of its weights
  // would add 115 MB.
  photon::ModelConfig c = photon::testing::tiny_vanilla();
  c.dim = 512;
  c.vocab_size = 8192;
  c.stack = photon::testing::tiny_stack(6, 8, 8, 64, 1536);
  const std::string path = std::string(PHOTON_BINARY_DIR) + "/test_dtypes_memory_" +
                           photon::dtype_name(GetParam()) + ".photon";
  photon::testing::write_test_model(c, path, 13, GetParam());
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const long file_kib = static_cast<long>(in.tellg()) / 1024;
  const long before = resident_kib();
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  photon_session* s = nullptr;
  ASSERT_EQ(photon_session_create(model, nullptr, &s), PHOTON_OK) << photon_last_error();
  const int32_t prompt[] = {1, 5, 9, 200, 31};
  ASSERT_EQ(photon_session_prefill(s, prompt, 5), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(s, 8, nullptr, nullptr, nullptr), PHOTON_OK)
      << photon_last_error();
  const long grown = resident_kib() - before;
  // The mapped file (all of it touched) plus this session's state and buffers (a few MiB).
  EXPECT_LE(grown, file_kib * 11 / 10 + 8 * 1024) << "file " << file_kib << " KiB";
  photon_session_free(s);
  photon_model_free(model);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Types, WeightMemory, ::testing::Values(DType::BF16, DType::Q8),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(photon::dtype_name(p.param));
                         });

}  // namespace
