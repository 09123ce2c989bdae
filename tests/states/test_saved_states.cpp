// Saved states of the released format versions (tests/states/saved/, written by the library of
// the release that wrote each version) restore in this build and continue as they did in that
// release, through generation, a prefill of known tokens and more generation: the same tokens, and
// the same log-probabilities to float rounding. Bit for bit only where this build's arithmetic is
// the recording build's (GCC, Release): clang's builds (the sanitizer runs) round some sums
// differently. A state restored wrongly (a cache, a position, the sampler's
// random state) moves them by far more, or changes the tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "saved_states.h"
#include "session_generated.h"

namespace {

using namespace photon::saved_states;

std::string saved_dir() {
  return std::string(PHOTON_SOURCE_DIR) + "/tests/states/saved";
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Log-probabilities at most rounding apart: 1e-4 with f32 caches (sums in another order differ by
// ~4e-5), 1e-3 with 16-bit ones (a value that rounds to the other neighbouring half moves what
// follows by ~3e-4).
void expect_rounding_apart(const std::vector<float>& got, const std::vector<float>& want,
                           photon_dtype kv_type, const char* what) {
  const double bound = kv_type == PHOTON_DTYPE_F32 ? 1e-4 : 1e-3;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], bound) << what << "[" << i << "]";
}

class SessionStateFormats : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int levels = 0; levels <= 3; ++levels) {
      const std::string path =
          photon::testing::scratch_model_path("saved_states_" + std::to_string(levels));
      write_model(levels, path);
      ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &models_[levels]), PHOTON_OK)
          << photon_last_error();
      std::remove(path.c_str());  // the loaded model keeps its mapping
    }
  }
  static void TearDownTestSuite() {
    for (photon_model*& m : models_) photon_model_free(m), m = nullptr;
  }
  static photon_model* models_[4];
};

photon_model* SessionStateFormats::models_[4] = {};

TEST_F(SessionStateFormats, ReleasedStatesContinueAsRecorded) {
  std::ifstream in(saved_dir() + "/expected.json");
  ASSERT_TRUE(in) << saved_dir() << "/expected.json";
  const nlohmann::json expected = nlohmann::json::parse(in);
  size_t checked = 0;
  for (const Kind& k : kKinds)
    for (const Variant& v : kVariants) {
      const std::string name = state_name(k, v);
      SCOPED_TRACE(name);
      const std::vector<uint8_t> blob = read_bytes(saved_dir() + "/" + name + ".phss");
      ASSERT_GT(blob.size(), 12u);
      EXPECT_EQ(photon::fb::GetSizePrefixedSessionState(blob.data())->format_version(),
                v.format_version);
      photon_session* s = nullptr;
      const photon_status restored =
          photon_session_restore(models_[k.levels], blob.data(), blob.size(), &s);
      ASSERT_NE(restored, PHOTON_ERR_WRONG_MODEL)
          << "write_test_model no longer writes the model these states were saved with";
      ASSERT_EQ(restored, PHOTON_OK) << photon_last_error();
      EXPECT_EQ(photon_session_mode(s),
                k.mode == PHOTON_MODE_RECGEN ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN);
      EXPECT_EQ(photon_session_kv_type(s), v.kv_type);
      EXPECT_EQ(photon_session_position(s), v.prompt + v.generate);
      const Continuation got = continue_session(s);
      photon_session_free(s);
      const Continuation want = from_json(expected.at(name));
      EXPECT_EQ(got.tokens, want.tokens);
      expect_rounding_apart(got.logprobs, want.logprobs, v.kv_type, "logprobs");
      expect_rounding_apart(got.known_logprobs, want.known_logprobs, v.kv_type, "known_logprobs");
      EXPECT_EQ(got.then_tokens, want.then_tokens);
      expect_rounding_apart(got.then_logprobs, want.then_logprobs, v.kv_type, "then_logprobs");
      ++checked;
    }
  EXPECT_EQ(checked, expected.size()) << "every recorded state was restored";
}

}  // namespace
