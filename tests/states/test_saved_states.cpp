// Saved states of the released format versions (tests/states/saved/, written by the library of
// the release that wrote each version) restore in this build and continue exactly as they did in
// that release: the same tokens and the same log-probabilities, bit for bit, through generation,
// a prefill of known tokens and more generation.
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
      EXPECT_EQ(got.logprobs, want.logprobs);
      EXPECT_EQ(got.known_logprobs, want.known_logprobs);
      EXPECT_EQ(got.then_tokens, want.then_tokens);
      EXPECT_EQ(got.then_logprobs, want.then_logprobs);
      ++checked;
    }
  EXPECT_EQ(checked, expected.size()) << "every recorded state was restored";
}

}  // namespace
