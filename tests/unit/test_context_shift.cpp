// Generation past a full context (photon_session_options_set_context_shift) against its
// definition: each time the context fills, a new session of the same settings is prefilled with
// the last context / 2 tokens of the history and generates on, until the context fills again.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::ModelConfig;
using photon::testing::collect;
using photon::testing::Generated;

constexpr int kContext = 24;
constexpr int kTokens = 50;  // several shifts

struct Case {
  int levels;  // 0: vanilla
  photon_mode mode;
};

std::string case_name(const Case& c) {
  return (c.levels == 0 ? std::string("Vanilla") : "Photon" + std::to_string(c.levels)) +
         (c.mode == PHOTON_MODE_RECGEN ? "RecGen" : "HierGen");
}

class ContextShift : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case c = GetParam();
    const ModelConfig config =
        c.levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(c.levels);
    path_ = photon::testing::scratch_model_path("test_context_shift_" + case_name(c));
    photon::testing::write_test_model(config, path_, 11 + c.levels);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  photon_session* session(bool shift, uint64_t seed) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, GetParam().mode);
    photon_session_options_set_context_length(o, kContext);
    photon_session_options_set_temperature(o, 0.9f);
    photon_session_options_set_seed(o, seed);
    photon_session_options_set_ignore_eos(o, 1);
    EXPECT_EQ(photon_session_options_set_context_shift(o, shift ? 1 : 0), PHOTON_OK);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  static std::vector<int32_t> history(photon_session* s) {
    std::vector<int32_t> tokens(static_cast<size_t>(photon_session_position(s)));
    size_t n = 0;
    EXPECT_EQ(photon_session_tokens(s, tokens.data(), tokens.size(), &n), PHOTON_OK);
    return tokens;
  }

  // The definition: sessions without the shift, each prefilled with the last half of the one
  // before when that one stopped at its full context. `last` receives the last one's history.
  Generated explicit_shifts(const std::vector<int32_t>& prompt, uint64_t seed,
                            std::vector<int32_t>* last) {
    Generated out;
    std::vector<int32_t> tokens = prompt;
    while (static_cast<int>(out.tokens.size()) < kTokens) {
      photon_session* s = session(false, seed);
      EXPECT_EQ(photon_session_prefill(s, tokens.data(), tokens.size()), PHOTON_OK)
          << photon_last_error();
      const int32_t budget = kTokens - static_cast<int32_t>(out.tokens.size());
      EXPECT_EQ(photon_session_generate(s, budget, &collect, &out, nullptr), PHOTON_OK)
          << photon_last_error();
      *last = history(s);
      if (photon_session_stop_reason(s) != PHOTON_STOP_CONTEXT_FULL) {
        EXPECT_EQ(static_cast<int>(out.tokens.size()), kTokens);
        photon_session_free(s);
        break;
      }
      EXPECT_EQ(static_cast<int>(last->size()), kContext);
      tokens.assign(last->end() - kContext / 2, last->end());
      photon_session_free(s);
    }
    return out;
  }

  std::string path_;
  photon_model* model_ = nullptr;
};

bool same(const Generated& a, const Generated& b) {
  return a.tokens == b.tokens && a.logprobs.size() == b.logprobs.size() &&
         std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)) == 0;
}

TEST_P(ContextShift, EqualsANewSessionPrefilledWithTheLastHalf) {
  const std::vector<int32_t> prompt{1, 17, 300, 5, 42, 42, 7, 99, 120, 3, 8};
  std::vector<int32_t> expected_history;
  const Generated expected = explicit_shifts(prompt, 5, &expected_history);
  ASSERT_EQ(static_cast<int>(expected.tokens.size()), kTokens);

  // One call through every shift.
  photon_session* s = session(true, 5);
  ASSERT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
  Generated shifted;
  int32_t n = 0;
  ASSERT_EQ(photon_session_generate(s, kTokens, &collect, &shifted, &n), PHOTON_OK)
      << photon_last_error();
  EXPECT_EQ(n, kTokens);
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_LENGTH);
  EXPECT_TRUE(same(shifted, expected));
  EXPECT_EQ(history(s), expected_history);
  photon_session_free(s);

  // Calls of a few tokens each, and the pull API: the same.
  s = session(true, 5);
  ASSERT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
  Generated pieces;
  while (static_cast<int>(pieces.tokens.size()) < kTokens - 7)
    ASSERT_EQ(photon_session_generate(s, 7, &collect, &pieces, nullptr), PHOTON_OK);
  while (static_cast<int>(pieces.tokens.size()) < kTokens) {
    int32_t token = -1;
    size_t piece_len = 0;
    float logprob = 0.0f;
    ASSERT_EQ(photon_session_next_token(s, &token, nullptr, 0, &piece_len, &logprob), PHOTON_OK);
    ASSERT_GE(token, 0);
    pieces.tokens.push_back(token);
    pieces.logprobs.push_back(logprob);
  }
  EXPECT_TRUE(same(pieces, expected));
  photon_session_free(s);
}

TEST_P(ContextShift, BatchedSessionsShiftOnTheirOwn) {
  // Different prompt lengths: the sessions fill their contexts at different steps.
  const std::vector<std::vector<int32_t>> prompts{{1, 17, 300, 5}, {1, 9, 8, 7, 6, 5, 4, 3, 2}};
  std::vector<Generated> expected(2);
  std::vector<photon_session*> sessions;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> last;
    expected[i] = explicit_shifts(prompts[i], 30 + i, &last);
    sessions.push_back(session(true, 30 + i));
    ASSERT_EQ(photon_session_prefill(sessions[i], prompts[i].data(), prompts[i].size()), PHOTON_OK);
  }
  std::vector<Generated> batched(2);
  ASSERT_EQ(photon_session_generate_batch(sessions.data(), sessions.size(), kTokens,
                                          &photon::testing::collect_batch, &batched, nullptr),
            PHOTON_OK)
      << photon_last_error();
  for (size_t i = 0; i < sessions.size(); ++i) {
    EXPECT_TRUE(same(batched[i], expected[i])) << "session " << i;
    photon_session_free(sessions[i]);
  }
}

TEST_P(ContextShift, OffStopsAtTheContextAndTheSettingReadsBack) {
  photon_session* s = session(false, 1);
  const std::vector<int32_t> prompt{1, 2, 3};
  ASSERT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
  int32_t n = 0;
  ASSERT_EQ(photon_session_generate(s, kTokens, nullptr, nullptr, &n), PHOTON_OK);
  EXPECT_EQ(n, kContext - 3);
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_CONTEXT_FULL);
  // Turned on through set_sampler (as for a restored session), it goes on.
  photon_session_options* o = nullptr;
  ASSERT_EQ(photon_session_get_options(s, &o), PHOTON_OK);
  ASSERT_EQ(photon_session_options_set_context_shift(o, 1), PHOTON_OK);
  ASSERT_EQ(photon_session_set_sampler(s, o), PHOTON_OK);
  photon_session_options_free(o);
  ASSERT_EQ(photon_session_generate(s, 5, nullptr, nullptr, &n), PHOTON_OK);
  EXPECT_EQ(n, 5);
  EXPECT_EQ(photon_session_position(s), kContext / 2 + 5);
  photon_session_free(s);
  EXPECT_EQ(photon_session_options_set_context_shift(nullptr, 1), PHOTON_ERR_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(Modes, ContextShift,
                         ::testing::Values(Case{0, PHOTON_MODE_HIERGEN},
                                           Case{1, PHOTON_MODE_HIERGEN},
                                           Case{2, PHOTON_MODE_HIERGEN},
                                           Case{2, PHOTON_MODE_RECGEN}),
                         [](const auto& param_info) { return case_name(param_info.param); });

}  // namespace
