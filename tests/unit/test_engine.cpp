// Engine invariants through the public API: HierGen equals teacher forcing at every prompt length,
// RecGen's chunk-parallel decoding equals its sequential decoding, RecGen keeps only top-level KV,
// and the stop rules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::ModelConfig;

using photon::testing::collect;
using photon::testing::Generated;

class EngineTest : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else the number of PHOTON levels.
  void SetUp() override {
    const int levels = GetParam();
    config_ = levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels);
    path_ = photon::testing::scratch_model_path("test_engine_" + std::to_string(levels));
    photon::testing::write_test_model(config_, path_, 7 + levels);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
    meta_ = levels == 0 ? 4 : static_cast<int>(config_.block_tokens(levels));
    for (int i = 0; i < 3 * meta_ + 40; ++i)
      sequence_.push_back(i == 0 ? 1 : 3 + (i * 37 + 11) % 500);
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  photon_session* session(photon_mode mode, float temperature = 0.0f, uint64_t seed = 0) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, mode);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session_options_set_temperature(o, temperature);
    photon_session_options_set_seed(o, seed);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  std::vector<float> score(const std::vector<int32_t>& tokens) {
    std::vector<float> lp(tokens.size());
    EXPECT_EQ(photon_model_score(model_, tokens.data(), tokens.size(), lp.data()), PHOTON_OK)
        << photon_last_error();
    return lp;
  }

  // Each generated logprob must be HierGen's teacher-forced score of the prompt sequence_[0, p)
  // followed by what was generated.
  void expect_teacher_forced(int p, const Generated& g, const std::string& what) {
    std::vector<int32_t> all(sequence_.begin(), sequence_.begin() + p);
    all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    const std::vector<float> tf = score(all);
    for (size_t i = 0; i < g.tokens.size(); ++i)
      EXPECT_NEAR(g.logprobs[i], tf[p + i], 1e-4) << what << " step " << i;
  }

  ModelConfig config_;
  std::string path_;
  photon_model* model_ = nullptr;
  int meta_ = 0;
  std::vector<int32_t> sequence_;
};

TEST_P(EngineTest, HierGenEqualsTeacherForcingAtEveryPromptLength) {
  const int n_gen = meta_ + 3;
  for (int p = 1; p <= 2 * meta_ + 1; ++p) {
    photon_session* s = session(PHOTON_MODE_HIERGEN);
    // Two prefill calls (split mid-prompt) must act as one.
    ASSERT_EQ(photon_session_prefill(s, sequence_.data(), p / 2), PHOTON_OK);
    ASSERT_EQ(photon_session_prefill(s, sequence_.data() + p / 2, p - p / 2), PHOTON_OK);
    Generated g;
    ASSERT_EQ(photon_session_generate(s, n_gen, collect, &g, nullptr), PHOTON_OK)
        << photon_last_error();
    ASSERT_EQ(static_cast<int>(g.tokens.size()), n_gen);
    expect_teacher_forced(p, g, "prompt " + std::to_string(p));
    photon_session_free(s);
  }
}

// One prefill that completes several top-level units at once: the open unit is conditioned on
// the last of them.
TEST_P(EngineTest, HierGenAfterOneLongPrefillEqualsTeacherForcing) {
  const int p = 3 * meta_ + 7;
  photon_session* s = session(PHOTON_MODE_HIERGEN);
  ASSERT_EQ(photon_session_prefill(s, sequence_.data(), p), PHOTON_OK) << photon_last_error();
  Generated g;
  ASSERT_EQ(photon_session_generate(s, meta_ + 3, collect, &g, nullptr), PHOTON_OK)
      << photon_last_error();
  expect_teacher_forced(p, g, "prompt " + std::to_string(p));
  photon_session_free(s);
}

// A repetition penalty changes which token is chosen, not the distribution reported: each
// logprob is the model's own, i.e. HierGen's teacher-forced score of the sequence it produced.
TEST_P(EngineTest, PenalizedLogprobsAreTheModelsOwn) {
  photon_session_options* o = nullptr;
  ASSERT_EQ(photon_session_options_create(&o), PHOTON_OK);
  photon_session_options_set_mode(o, PHOTON_MODE_HIERGEN);
  photon_session_options_set_ignore_eos(o, 1);
  ASSERT_EQ(photon_session_options_set_repetition_penalty(o, 3.0f, 8), PHOTON_OK);
  photon_session* s = nullptr;
  ASSERT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
  photon_session_options_free(o);
  const int p = meta_ + 1, n_gen = 2 * meta_ + 3;
  ASSERT_EQ(photon_session_prefill(s, sequence_.data(), p), PHOTON_OK);
  Generated g;
  ASSERT_EQ(photon_session_generate(s, n_gen, collect, &g, nullptr), PHOTON_OK)
      << photon_last_error();
  ASSERT_EQ(static_cast<int>(g.tokens.size()), n_gen);
  expect_teacher_forced(p, g, "penalized");
  photon_session_free(s);
}

// Each token's alternatives are its position's most likely ids, with HierGen's teacher-forced
// log-probabilities, most likely first; the sampled token is among them or below the last; the
// pull API reports the same.
TEST_P(EngineTest, AlternativesAreTheMostLikelyIdsOfTheirPosition) {
  constexpr int kTop = 5;
  const int p = meta_ + 1, n_gen = meta_ + 4;
  auto sampling_session = [&] {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, PHOTON_MODE_HIERGEN);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session_options_set_temperature(o, 1.5f);
    photon_session_options_set_seed(o, 8);
    EXPECT_EQ(photon_session_options_set_top_logprobs(o, kTop), PHOTON_OK);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    EXPECT_EQ(photon_session_prefill(s, sequence_.data(), p), PHOTON_OK);
    return s;
  };
  photon_session* s = sampling_session();
  Generated g;
  ASSERT_EQ(photon_session_generate(s, n_gen, collect, &g, nullptr), PHOTON_OK)
      << photon_last_error();
  photon_session_free(s);
  ASSERT_EQ(static_cast<int>(g.top.size()), n_gen);
  std::vector<int32_t> context(sequence_.begin(), sequence_.begin() + p);
  for (int i = 0; i < n_gen; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const photon::testing::Alternatives& top = g.top[static_cast<size_t>(i)];
    ASSERT_EQ(static_cast<int>(top.size()), kTop);
    bool listed = false;
    for (size_t a = 0; a < top.size(); ++a) {
      if (a > 0) {
        EXPECT_TRUE(top[a].second < top[a - 1].second ||
                    (top[a].second == top[a - 1].second && top[a].first > top[a - 1].first));
      }
      std::vector<int32_t> with = context;
      with.push_back(top[a].first);
      EXPECT_NEAR(top[a].second, score(with).back(), 1e-4) << "alternative " << top[a].first;
      if (top[a].first == g.tokens[static_cast<size_t>(i)]) {
        listed = true;
        EXPECT_FLOAT_EQ(top[a].second, g.logprobs[static_cast<size_t>(i)]);
      }
    }
    if (!listed) {
      EXPECT_LE(g.logprobs[static_cast<size_t>(i)], top.back().second);
    }
    context.push_back(g.tokens[static_cast<size_t>(i)]);
  }
  // One token per pull: the same alternatives.
  s = sampling_session();
  for (int i = 0; i < n_gen; ++i) {
    int32_t token = -1;
    size_t len = 0;
    ASSERT_EQ(photon_session_next_token(s, &token, nullptr, 0, &len, nullptr), PHOTON_OK);
    EXPECT_EQ(token, g.tokens[static_cast<size_t>(i)]);
    EXPECT_EQ(photon::testing::last_top(), g.top[static_cast<size_t>(i)]);
  }
  photon_session_free(s);
}

// A logit bias's ids are checked against the model's vocabulary, which the options do not know.
TEST_P(EngineTest, ALogitBiasOutsideTheVocabularyIsRefused) {
  const int32_t vocab = photon_model_vocab_size(model_);
  const int32_t tokens[] = {3, vocab};
  const float biases[] = {1.0f, 2.0f};
  photon_session_options* o = nullptr;
  ASSERT_EQ(photon_session_options_create(&o), PHOTON_OK);
  ASSERT_EQ(photon_session_options_set_logit_bias(o, tokens, biases, 2), PHOTON_OK);
  photon_session* s = nullptr;
  EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_ERR_BAD_TOKEN);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(photon_last_error()).find("logit bias's token " + std::to_string(vocab)),
            std::string::npos)
      << photon_last_error();
  photon_session* fine = session(PHOTON_MODE_AUTO);
  EXPECT_EQ(photon_session_set_sampler(fine, o), PHOTON_ERR_BAD_TOKEN);
  ASSERT_EQ(photon_session_options_set_logit_bias(o, tokens, biases, 1), PHOTON_OK);
  EXPECT_EQ(photon_session_set_sampler(fine, o), PHOTON_OK) << photon_last_error();
  photon_session_free(fine);
  photon_session_options_free(o);
}

TEST_P(EngineTest, RecGenParallelEqualsSequential) {
  if (GetParam() < 2) GTEST_SKIP() << "RecGen needs L >= 2";
  for (int p : {1, meta_ - 1, meta_, meta_ + 2}) {
    photon_session* whole = session(PHOTON_MODE_RECGEN, 0.9f, 42);
    photon_session* steps = session(PHOTON_MODE_RECGEN, 0.9f, 42);
    ASSERT_EQ(photon_session_prefill(whole, sequence_.data(), p), PHOTON_OK);
    ASSERT_EQ(photon_session_prefill(steps, sequence_.data(), p), PHOTON_OK);
    Generated a, b;
    ASSERT_EQ(photon_session_generate(whole, 2 * meta_ + 3, collect, &a, nullptr), PHOTON_OK)
        << photon_last_error();
    for (int i = 0; i < 2 * meta_ + 3; ++i)
      ASSERT_EQ(photon_session_generate(steps, 1, collect, &b, nullptr), PHOTON_OK)
          << photon_last_error();
    ASSERT_EQ(a.tokens.size(), static_cast<size_t>(2 * meta_ + 3)) << "prompt " << p;
    EXPECT_EQ(a.tokens, b.tokens) << "prompt " << p;
    ASSERT_EQ(b.logprobs.size(), a.logprobs.size()) << "prompt " << p;
    for (size_t i = 0; i < a.logprobs.size(); ++i)
      EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-5) << "prompt " << p << ", token " << i;
    photon_session_free(whole);
    photon_session_free(steps);
  }
}

TEST_P(EngineTest, RecGenKeepsOnlyTopLevelKv) {
  const int L = GetParam();
  if (L < 2) GTEST_SKIP() << "RecGen needs L >= 2";
  photon_session* rec = session(PHOTON_MODE_RECGEN);
  photon_session* hier = session(PHOTON_MODE_HIERGEN);
  for (photon_session* s : {rec, hier}) {
    ASSERT_EQ(photon_session_prefill(s, sequence_.data(), 2 * meta_ + 1), PHOTON_OK);
    ASSERT_EQ(photon_session_generate(s, meta_, nullptr, nullptr, nullptr), PHOTON_OK);
  }
  for (int l = 1; l <= L; ++l) {
    uint64_t rec_enc = 0, hier_enc = 0;
    ASSERT_EQ(photon_session_kv_bytes(rec, l, &rec_enc, nullptr), PHOTON_OK);
    ASSERT_EQ(photon_session_kv_bytes(hier, l, &hier_enc, nullptr), PHOTON_OK);
    EXPECT_GT(hier_enc, 0u) << "level " << l;
    if (l < L)
      EXPECT_EQ(rec_enc, 0u) << "level " << l;
    else
      EXPECT_EQ(rec_enc, hier_enc) << "the top level holds the same units in both modes";
  }
  uint64_t window = 0;
  ASSERT_EQ(photon_session_kv_bytes(rec, 1, nullptr, &window), PHOTON_OK);
  EXPECT_GT(window, 0u);
  EXPECT_EQ(photon_session_kv_bytes(rec, L + 1, nullptr, nullptr), PHOTON_ERR_INVALID_ARGUMENT);
  photon_session_free(rec);
  photon_session_free(hier);
}

TEST_P(EngineTest, BudgetCallbackAndContextStops) {
  photon_session* s = session(PHOTON_MODE_AUTO, 0.7f, 3);
  ASSERT_EQ(photon_session_prefill(s, sequence_.data(), 5), PHOTON_OK);
  int32_t n = -1;
  ASSERT_EQ(photon_session_generate(s, 7, nullptr, nullptr, &n), PHOTON_OK);
  EXPECT_EQ(n, 7);
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_LENGTH);
  EXPECT_EQ(photon_session_position(s), 12);
  auto stop_after_two = [](void* user, int32_t, const char*, size_t, float) {
    return ++*static_cast<int*>(user) >= 2 ? 1 : 0;
  };
  int calls = 0;
  ASSERT_EQ(photon_session_generate(s, 50, stop_after_two, &calls, &n), PHOTON_OK);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_CALLBACK);
  EXPECT_EQ(photon_session_position(s), 14);
  ASSERT_EQ(photon_session_generate(s, 100000, nullptr, nullptr, &n), PHOTON_OK);
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_CONTEXT_FULL);
  EXPECT_EQ(photon_session_position(s), config_.max_seq_len);
  photon_session_free(s);
}

// Messages of the one-session calls speak of "the session"; a batch's name the session's index.
TEST_P(EngineTest, EmptySessionMessagesNameTheSession) {
  photon_session* empty = session(PHOTON_MODE_AUTO, 0.0f, 1);
  photon_session* ready = session(PHOTON_MODE_AUTO, 0.0f, 1);
  ASSERT_EQ(photon_session_prefill(ready, sequence_.data(), 3), PHOTON_OK);
  const std::string advice = " holds no tokens; prefill at least BOS first";
  EXPECT_EQ(photon_session_generate(empty, 1, nullptr, nullptr, nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_last_error(), "photon_session_generate: the session" + advice);
  int32_t token = 0;
  size_t length = 0;
  EXPECT_EQ(photon_session_next_token(empty, &token, nullptr, 0, &length, nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_last_error(), "photon_session_next_token: the session" + advice);
  photon_session* batch[] = {ready, empty};
  EXPECT_EQ(photon_session_generate_batch(batch, 2, 1, nullptr, nullptr, nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_last_error(), "photon_session_generate_batch: session 1" + advice);
  photon_session_free(ready);
  photon_session_free(empty);
}

std::string ModelName(const ::testing::TestParamInfo<int>& param) {
  const char* const kNames[] = {"vanilla", "L1", "L2", "L3"};
  return kNames[param.param];
}

INSTANTIATE_TEST_SUITE_P(Models, EngineTest, ::testing::Values(0, 1, 2, 3), ModelName);

}  // namespace
