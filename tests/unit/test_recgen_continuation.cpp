// RecGen after generation takes known tokens (docs/model.md): a continuation is consumed as RecGen
// consumes what it sampled, so the log-probabilities a session reports for its prompt, its
// generated tokens, a known continuation and what it generates after it all equal RecGen scoring
// of the whole sequence with the first prompt as the prompt (itself checked against the PyTorch
// reference by tests/reference). A save and restore anywhere on the way changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::collect;
using photon::testing::Generated;

class RecGenContinuation : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    config_ = photon::testing::tiny_photon(GetParam());
    path_ = photon::testing::scratch_model_path("test_recgen_continuation_" +
                                                std::to_string(GetParam()));
    photon::testing::write_test_model(config_, path_, 31 + GetParam());
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
    meta_ = static_cast<int>(config_.block_tokens(2));
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  photon_session* recgen(float temperature) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, PHOTON_MODE_RECGEN);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session_options_set_temperature(o, temperature);
    photon_session_options_set_seed(o, 5);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  std::vector<float> score_recgen(const std::vector<int32_t>& tokens, size_t prompt) {
    photon_score_options* o = nullptr;
    EXPECT_EQ(photon_score_options_create(&o), PHOTON_OK);
    EXPECT_EQ(photon_score_options_set_mode(o, PHOTON_MODE_RECGEN), PHOTON_OK);
    EXPECT_EQ(photon_score_options_set_prompt_tokens(o, prompt), PHOTON_OK);
    std::vector<float> lp(tokens.size());
    EXPECT_EQ(photon_model_score_with(model_, tokens.data(), tokens.size(), o, lp.data()),
              PHOTON_OK)
        << photon_last_error();
    photon_score_options_free(o);
    return lp;
  }

  // A session that saves and restores itself after every call when `reload` is set.
  photon_session* maybe_reload(photon_session* s, bool reload) {
    if (!reload) return s;
    const std::vector<uint8_t> blob = photon::testing::save_state(s);
    photon_session_free(s);
    photon_session* restored = nullptr;
    EXPECT_EQ(photon_session_restore(model_, blob.data(), blob.size(), &restored), PHOTON_OK)
        << photon_last_error();
    return restored;
  }

  photon::ModelConfig config_;
  std::string path_;
  photon_model* model_ = nullptr;
  int meta_ = 0;
};

TEST_P(RecGenContinuation, EveryLogprobEqualsRecGenScoringOfTheWholeSequence) {
  for (bool reload : {false, true}) {
    for (int prompt_len : {1, meta_ - 1, meta_ + 2}) {
      SCOPED_TRACE("prompt " + std::to_string(prompt_len) + (reload ? ", reloaded" : ""));
      std::vector<int32_t> sequence;
      for (int i = 0; i < prompt_len; ++i) sequence.push_back(i == 0 ? 1 : 3 + (i * 41) % 400);
      std::vector<float> session_lp(prompt_len);
      photon_session* s = recgen(0.8f);
      ASSERT_EQ(
          photon_session_prefill_logprobs(s, sequence.data(), sequence.size(), session_lp.data()),
          PHOTON_OK)
          << photon_last_error();
      s = maybe_reload(s, reload);
      Generated first;
      ASSERT_EQ(photon_session_generate(s, meta_ + 3, collect, &first, nullptr), PHOTON_OK);
      ASSERT_EQ(first.tokens.size(), static_cast<size_t>(meta_ + 3));
      sequence.insert(sequence.end(), first.tokens.begin(), first.tokens.end());
      session_lp.insert(session_lp.end(), first.logprobs.begin(), first.logprobs.end());
      s = maybe_reload(s, reload);
      // A known turn that crosses level-2 units, given in two calls.
      std::vector<int32_t> turn;
      for (int i = 0; i < 2 * meta_ + 1; ++i) turn.push_back(5 + (i * 29) % 450);
      const size_t half = turn.size() / 2;
      std::vector<float> turn_lp(turn.size());
      ASSERT_EQ(photon_session_prefill_logprobs(s, turn.data(), half, turn_lp.data()), PHOTON_OK)
          << photon_last_error();
      s = maybe_reload(s, reload);
      ASSERT_EQ(photon_session_prefill_logprobs(s, turn.data() + half, turn.size() - half,
                                                turn_lp.data() + half),
                PHOTON_OK)
          << photon_last_error();
      sequence.insert(sequence.end(), turn.begin(), turn.end());
      session_lp.insert(session_lp.end(), turn_lp.begin(), turn_lp.end());
      Generated second;
      ASSERT_EQ(photon_session_generate(s, meta_ + 2, collect, &second, nullptr), PHOTON_OK);
      ASSERT_EQ(second.tokens.size(), static_cast<size_t>(meta_ + 2));
      sequence.insert(sequence.end(), second.tokens.begin(), second.tokens.end());
      session_lp.insert(session_lp.end(), second.logprobs.begin(), second.logprobs.end());
      ASSERT_EQ(photon_session_position(s), static_cast<int32_t>(sequence.size()));

      const std::vector<float> scored = score_recgen(sequence, prompt_len);
      ASSERT_EQ(scored.size(), session_lp.size());
      EXPECT_TRUE(std::isnan(scored[0]) && std::isnan(session_lp[0]));
      for (size_t i = 1; i < scored.size(); ++i)
        EXPECT_NEAR(session_lp[i], scored[i], 1e-4) << "position " << i;
      photon_session_free(s);
    }
  }
}

TEST_P(RecGenContinuation, GreedyStreamsDoNotDependOnSavingOrOnHowTheTurnIsSplit) {
  std::vector<int32_t> prompt = {1, 17, 230, 41};
  std::vector<int32_t> turn;
  for (int i = 0; i < meta_ + 3; ++i) turn.push_back(9 + (i * 13) % 300);
  std::vector<std::vector<int32_t>> streams;
  for (int variant = 0; variant < 3; ++variant) {
    photon_session* s = recgen(0.0f);
    ASSERT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
    Generated c;
    ASSERT_EQ(photon_session_generate(s, 5, collect, &c, nullptr), PHOTON_OK);
    s = maybe_reload(s, variant == 2);
    if (variant == 0) {
      ASSERT_EQ(photon_session_prefill(s, turn.data(), turn.size()), PHOTON_OK);
    } else {
      for (int32_t t : turn) ASSERT_EQ(photon_session_prefill(s, &t, 1), PHOTON_OK);
    }
    ASSERT_EQ(photon_session_generate(s, 2 * meta_, collect, &c, nullptr), PHOTON_OK);
    streams.push_back(c.tokens);
    photon_session_free(s);
  }
  EXPECT_EQ(streams[0], streams[1]);
  EXPECT_EQ(streams[0], streams[2]);
}

TEST_P(RecGenContinuation, ScoringWithTheWholePromptIsTeacherForcing) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 2 * meta_ + 5; ++i) tokens.push_back(i == 0 ? 1 : 4 + (i * 53) % 480);
  std::vector<float> tf(tokens.size());
  ASSERT_EQ(photon_model_score(model_, tokens.data(), tokens.size(), tf.data()), PHOTON_OK);
  for (size_t prompt : {tokens.size(), tokens.size() + 7}) {
    const std::vector<float> rec = score_recgen(tokens, prompt);
    for (size_t i = 1; i < tokens.size(); ++i) EXPECT_EQ(rec[i], tf[i]) << i;
  }
  // The prompt's own tokens and the first one after it are teacher forcing's too.
  const size_t prompt = meta_ + 1;
  const std::vector<float> rec = score_recgen(tokens, prompt);
  for (size_t i = 1; i <= prompt; ++i) EXPECT_NEAR(rec[i], tf[i], 1e-5) << i;
}

TEST(RecGenScoring, RefusesModelsWithoutRecGenAndBadOptions) {
  photon::ModelConfig config = photon::testing::tiny_photon(1);
  const std::string path = std::string(PHOTON_BINARY_DIR) + "/test_recgen_scoring_l1.photon";
  photon::testing::write_test_model(config, path, 3);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK);
  photon_score_options* o = nullptr;
  ASSERT_EQ(photon_score_options_create(&o), PHOTON_OK);
  EXPECT_EQ(photon_score_options_set_prompt_tokens(o, 0), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_score_options_set_mode(o, static_cast<photon_mode>(9)),
            PHOTON_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(photon_score_options_set_mode(o, PHOTON_MODE_RECGEN), PHOTON_OK);
  const int32_t tokens[] = {1, 5, 6, 7};
  float lp[4];
  EXPECT_EQ(photon_model_score_with(model, tokens, 4, o, lp), PHOTON_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(photon_last_error()).find("RecGen"), std::string::npos);
  photon_score_options_free(o);
  photon_score_options_free(nullptr);
  photon_model_free(model);
  std::remove(path.c_str());
}

std::string Levels(const ::testing::TestParamInfo<int>& param) {
  return "L" + std::to_string(param.param);
}

INSTANTIATE_TEST_SUITE_P(Models, RecGenContinuation, ::testing::Values(2, 3), Levels);

}  // namespace
