// The engine against the golden vectors of the PyTorch reference (tests/golden/<case>/, written by
// scripts/make-golden): teacher-forced scores, greedy HierGen and RecGen token by token. Uses only
// the public C API, as an application would. The long_* cases cross the engine's batching limits
// (windows per scoring pass, prefill slices, LM-head blocks) for vanilla and L = 1, 2, 3.
#include <gtest/gtest.h>
#include <photon.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Logprobs are compared to the float64 reference; the engine computes in float32.
constexpr double kTolerance = 1e-4;

fs::path golden_root() {
  return fs::path(PHOTON_SOURCE_DIR) / "tests" / "golden";
}

std::vector<std::string> golden_cases() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(golden_root(), ec))
    if (fs::exists(entry.path() / "golden.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return json::parse(in);
}

std::string api_error(photon_status status) {
  return std::string(photon_status_name(status)) + ": " + photon_last_error();
}

// One case's model converted from config.json + weights.npz into a .photon file and loaded. The
// file name holds the process id, since ctest may run this case's tests in parallel processes.
class GoldenModel {
 public:
  explicit GoldenModel(const std::string& name) {
    const fs::path dir = golden_root() / name;
    const fs::path out_dir = fs::path(PHOTON_BINARY_DIR) / "golden_models";
    fs::create_directories(out_dir);
    path_ = out_dir / (name + "." + std::to_string(::getpid()) + ".photon");
    photon_write_options* options = nullptr;
    photon_status status = photon_write_options_create(&options);
    if (status == PHOTON_OK) {
      const std::string tokenizer = std::string(PHOTON_SOURCE_DIR) + "/tests/data/tiny.model";
      status = photon_write_options_set_tokenizer_file(options, tokenizer.c_str());
    }
    if (status == PHOTON_OK)
      status = photon_model_convert((dir / "config.json").c_str(), (dir / "weights.npz").c_str(),
                                    path_.c_str(), options);
    photon_write_options_free(options);
    if (status != PHOTON_OK) {
      error_ = "converting " + dir.string() + ": " + api_error(status);
      return;
    }
    status = photon_model_load(path_.c_str(), nullptr, &model_);
    if (status != PHOTON_OK) error_ = "loading " + path_.string() + ": " + api_error(status);
  }
  ~GoldenModel() {
    photon_model_free(model_);
    std::error_code ec;
    fs::remove(path_, ec);
  }
  GoldenModel(const GoldenModel&) = delete;
  GoldenModel& operator=(const GoldenModel&) = delete;

  const photon_model* model() const { return model_; }
  const std::string& error() const { return error_; }

 private:
  fs::path path_;
  photon_model* model_ = nullptr;
  std::string error_;
};

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

int collect(void* user, int32_t token, const char*, size_t, float logprob) {
  auto* out = static_cast<Generated*>(user);
  out->tokens.push_back(token);
  out->logprobs.push_back(logprob);
  return 0;
}

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = read_json(golden_root() / GetParam() / "golden.json");
    auto& slot = models_[GetParam()];
    if (!slot) slot = std::make_unique<GoldenModel>(GetParam());
    ASSERT_EQ(slot->error(), "");
    model_ = slot->model();
  }
  static void TearDownTestSuite() { models_.clear(); }

  // Greedy generation of n tokens after prompt in the given mode, ignoring EOS.
  Generated generate(photon_mode mode, const std::vector<int32_t>& prompt, size_t n) {
    Generated out;
    photon_session_options* options = nullptr;
    photon_session* session = nullptr;
    photon_status status = photon_session_options_create(&options);
    if (status == PHOTON_OK) status = photon_session_options_set_mode(options, mode);
    if (status == PHOTON_OK) status = photon_session_options_set_ignore_eos(options, 1);
    if (status == PHOTON_OK) status = photon_session_create(model_, options, &session);
    photon_session_options_free(options);
    if (status == PHOTON_OK) status = photon_session_prefill(session, prompt.data(), prompt.size());
    int32_t n_generated = -1;
    if (status == PHOTON_OK)
      status =
          photon_session_generate(session, static_cast<int32_t>(n), collect, &out, &n_generated);
    EXPECT_EQ(status, PHOTON_OK) << api_error(status);
    if (status == PHOTON_OK) {
      EXPECT_EQ(n_generated, static_cast<int32_t>(n));
      EXPECT_EQ(photon_session_stop_reason(session), PHOTON_STOP_LENGTH);
    }
    photon_session_free(session);
    return out;
  }

  // Compares the engine's generation with one golden entry: identical ids, logprobs within
  // kTolerance. Stops at the first differing id, after which the two sequences are unrelated.
  void expect_same_generation(const json& entry, photon_mode mode, const std::string& what) {
    const auto prompt = prompt_of(entry);
    const auto tokens = entry["tokens"].get<std::vector<int32_t>>();
    const auto logprobs = entry["logprobs"].get<std::vector<double>>();
    const Generated got = generate(mode, prompt, tokens.size());
    ASSERT_EQ(got.tokens.size(), tokens.size()) << what;
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_EQ(got.tokens[i], tokens[i])
          << what << ": first differing generated token at step " << i << " (position "
          << prompt.size() + i << "); reference logprob " << logprobs[i] << ", engine "
          << got.logprobs[i];
      EXPECT_NEAR(got.logprobs[i], logprobs[i], kTolerance) << what << ", step " << i;
    }
  }

  // A generation's prompt: its own tokens, or (long cases) the first prompt_len scored tokens.
  std::vector<int32_t> prompt_of(const json& entry) const {
    if (entry.contains("prompt")) return entry["prompt"].get<std::vector<int32_t>>();
    const auto scored = golden_["score"]["tokens"].get<std::vector<int32_t>>();
    const size_t n = entry["prompt_len"].get<size_t>();
    if (n > scored.size()) throw std::runtime_error("prompt_len exceeds the scored tokens");
    return std::vector<int32_t>(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n));
  }

  std::string describe(const char* mode, size_t index, const json& entry) {
    return GetParam() + " " + mode + "[" + std::to_string(index) + "] (prompt length " +
           std::to_string(prompt_of(entry).size()) + ")";
  }

  json golden_;
  const photon_model* model_ = nullptr;
  static std::map<std::string, std::unique_ptr<GoldenModel>> models_;
};

std::map<std::string, std::unique_ptr<GoldenModel>> Golden::models_;

TEST_P(Golden, ModelMatchesItsCase) {
  EXPECT_EQ(photon_model_arch(model_), golden_["arch"].get<std::string>());
  EXPECT_EQ(photon_model_levels(model_), golden_["levels"].get<int32_t>());
}

TEST_P(Golden, TeacherForcedScoresMatchReference) {
  const auto tokens = golden_["score"]["tokens"].get<std::vector<int32_t>>();
  const json& expected = golden_["score"]["logprobs"];
  ASSERT_EQ(expected.size(), tokens.size());
  std::vector<float> logprobs(tokens.size(), 0.0f);
  const photon_status status =
      photon_model_score(model_, tokens.data(), tokens.size(), logprobs.data());
  ASSERT_EQ(status, PHOTON_OK) << api_error(status);
  EXPECT_TRUE(std::isnan(logprobs[0])) << "the first token is not predicted";
  for (size_t i = 1; i < tokens.size(); ++i)
    EXPECT_NEAR(logprobs[i], expected[i].get<double>(), kTolerance) << "position " << i;
}

TEST_P(Golden, HierGenMatchesReference) {
  const json& entries = golden_["hiergen"];
  ASSERT_FALSE(entries.empty());
  for (size_t k = 0; k < entries.size(); ++k)
    expect_same_generation(entries[k], PHOTON_MODE_HIERGEN, describe("hiergen", k, entries[k]));
}

TEST_P(Golden, RecGenMatchesReference) {
  const json& entries = golden_["recgen"];
  if (golden_["arch"] != "photon" || golden_["levels"].get<int>() < 2) {
    EXPECT_TRUE(entries.empty());
    photon_session_options* options = nullptr;
    photon_session* session = nullptr;
    ASSERT_EQ(photon_session_options_create(&options), PHOTON_OK);
    ASSERT_EQ(photon_session_options_set_mode(options, PHOTON_MODE_RECGEN), PHOTON_OK);
    EXPECT_EQ(photon_session_create(model_, options, &session), PHOTON_ERR_UNSUPPORTED);
    photon_session_free(session);
    photon_session_options_free(options);
    return;
  }
  ASSERT_FALSE(entries.empty());
  for (size_t k = 0; k < entries.size(); ++k)
    expect_same_generation(entries[k], PHOTON_MODE_RECGEN, describe("recgen", k, entries[k]));
}

// HierGen is teacher forcing evaluated incrementally (spec 5): the engine's own step logprobs must
// equal its own teacher-forced scores of the same sequence.
TEST_P(Golden, HierGenStepsEqualTeacherForcing) {
  for (const json& entry : golden_["hiergen"]) {
    const auto prompt = prompt_of(entry);
    const Generated got = generate(PHOTON_MODE_HIERGEN, prompt, entry["tokens"].size());
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), got.tokens.begin(), got.tokens.end());
    std::vector<float> scores(sequence.size(), 0.0f);
    const photon_status status =
        photon_model_score(model_, sequence.data(), sequence.size(), scores.data());
    ASSERT_EQ(status, PHOTON_OK) << api_error(status);
    for (size_t i = 0; i < got.tokens.size(); ++i)
      EXPECT_NEAR(got.logprobs[i], scores[prompt.size() + i], kTolerance)
          << "prompt length " << prompt.size() << ", step " << i;
  }
}

std::string case_name(const ::testing::TestParamInfo<std::string>& case_info) {
  return case_info.param;
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::ValuesIn(golden_cases()), case_name);

TEST(GoldenCases, AllCasesArePresent) {
  const std::vector<std::string> cases = golden_cases();
  for (const char* name : {"block_c4_r2", "photon_l2_concat_linear", "photon_l3_mixed",
                           "photon_l2_linear", "vanilla_gqa", "photon_l3_c232", "photon_l3_c224",
                           "long_vanilla", "long_block_c2", "long_photon_l2", "long_photon_l3"})
    EXPECT_NE(std::find(cases.begin(), cases.end(), name), cases.end()) << name;
}

}  // namespace
