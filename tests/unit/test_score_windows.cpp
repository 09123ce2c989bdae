// Scoring sequences longer than the context in sliding windows (photon_score_options_set_stride),
// against the documented layout computed here: window w covers [w * stride, w * stride + context)
// and its scores of the tokens after window w - 1's end are a photon_model_score (or, in RecGen,
// a photon_model_score_with whose prompt is the part window w - 1 scored) of that window alone;
// photon_model_score_top's alternatives likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "photon.h"
#include "test_models.h"

namespace {

using photon::ModelConfig;

constexpr int kContext = 48;

struct Window {
  size_t begin, first_scored, end;
};

std::vector<Window> layout(size_t n, size_t context, size_t stride) {
  std::vector<Window> out{{0, 0, std::min(n, context)}};
  while (out.back().end < n) {
    const size_t begin = out.back().begin + stride;
    out.push_back({begin, out.back().end, std::min(n, begin + context)});
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ScoreWindows : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else the number of PHOTON levels.
  void SetUp() override {
    const int levels = GetParam();
    ModelConfig config =
        levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels);
    config.max_seq_len = kContext;
    path_ = photon::testing::scratch_model_path("test_score_windows_" + std::to_string(levels));
    photon::testing::write_test_model(config, path_, 21 + levels);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
    for (int i = 0; i < 3 * kContext + 7; ++i)
      tokens_.push_back(i == 0 ? 1 : 3 + (i * 53 + 5) % 500);
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  // photon_model_score_with over `tokens` (NULL options when stride < 0).
  std::vector<float> score(const std::vector<int32_t>& tokens, int32_t stride,
                           photon_mode mode = PHOTON_MODE_AUTO, size_t prompt = 1) {
    photon_score_options* options = nullptr;
    EXPECT_EQ(photon_score_options_create(&options), PHOTON_OK);
    if (stride >= 0) {
      EXPECT_EQ(photon_score_options_set_stride(options, stride), PHOTON_OK);
    }
    EXPECT_EQ(photon_score_options_set_mode(options, mode), PHOTON_OK);
    EXPECT_EQ(photon_score_options_set_prompt_tokens(options, prompt), PHOTON_OK);
    std::vector<float> out(tokens.size());
    EXPECT_EQ(photon_model_score_with(model_, tokens.data(), tokens.size(),
                                      stride < 0 ? nullptr : options, out.data()),
              PHOTON_OK)
        << photon_last_error();
    photon_score_options_free(options);
    return out;
  }

  // The documented combination of one score per window.
  std::vector<float> window_by_window(size_t stride, photon_mode mode = PHOTON_MODE_AUTO,
                                      size_t prompt = 1) {
    std::vector<float> out(tokens_.size());
    for (const Window& w : layout(tokens_.size(), kContext, stride)) {
      const std::vector<int32_t> part(tokens_.begin() + w.begin, tokens_.begin() + w.end);
      const std::vector<float> scored =
          score(part, 0, mode, w.begin == 0 ? prompt : w.first_scored - w.begin);
      std::copy(scored.begin() + (w.first_scored - w.begin), scored.end(),
                out.begin() + w.first_scored);
    }
    return out;
  }

  std::string path_;
  photon_model* model_ = nullptr;
  std::vector<int32_t> tokens_;
};

TEST_P(ScoreWindows, EachWindowScoresAsItsOwnSequence) {
  ASSERT_EQ(layout(tokens_.size(), kContext, kContext / 2).size(), 6u);
  const std::vector<float> expected = window_by_window(kContext / 2);
  // The default stride is half the context, with or without options.
  std::vector<float> plain(tokens_.size());
  ASSERT_EQ(photon_model_score(model_, tokens_.data(), tokens_.size(), plain.data()), PHOTON_OK)
      << photon_last_error();
  EXPECT_TRUE(std::isnan(plain[0]));
  EXPECT_TRUE(same_bits(plain, expected));
  EXPECT_TRUE(same_bits(score(tokens_, -1), expected));
  EXPECT_TRUE(same_bits(score(tokens_, 0), expected));
  EXPECT_TRUE(same_bits(score(tokens_, kContext / 2), expected));
  for (size_t i = 1; i < plain.size(); ++i) EXPECT_LT(plain[i], 0.0f) << i;
  for (const int32_t stride : {1, 7, kContext - 1})
    EXPECT_TRUE(same_bits(score(tokens_, stride), window_by_window(stride))) << stride;
}

TEST_P(ScoreWindows, WithinTheContextIsOnePass) {
  const std::vector<int32_t> fits(tokens_.begin(), tokens_.begin() + kContext);
  // A stride too long for windows does not matter when none are needed.
  EXPECT_TRUE(same_bits(score(fits, kContext + 5), score(fits, -1)));
}

TEST_P(ScoreWindows, RecGenWindowsTakeTheOverlapAsTheirPrompt) {
  if (GetParam() < 2) GTEST_SKIP() << "RecGen needs two levels";
  const std::vector<float> expected = window_by_window(20, PHOTON_MODE_RECGEN, 3);
  EXPECT_TRUE(same_bits(score(tokens_, 20, PHOTON_MODE_RECGEN, 3), expected));
  // RecGen differs from teacher forcing after each window's prompt.
  EXPECT_FALSE(same_bits(expected, window_by_window(20)));
}

TEST_P(ScoreWindows, StridesOutsideTheContextAreRefused) {
  photon_score_options* options = nullptr;
  ASSERT_EQ(photon_score_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_score_options_set_stride(options, -1), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_score_options_set_stride(nullptr, 4), PHOTON_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(photon_score_options_set_stride(options, kContext), PHOTON_OK);
  std::vector<float> out(tokens_.size());
  EXPECT_EQ(photon_model_score_with(model_, tokens_.data(), tokens_.size(), options, out.data()),
            PHOTON_ERR_INVALID_ARGUMENT);
  const std::string message = photon_last_error();
  EXPECT_NE(message.find("stride 48 must be below the context"), std::string::npos) << message;
  photon_score_options_free(options);
}

// photon_model_score_top: each position's alternatives, window by window like its logprobs.
struct Scored {
  std::vector<float> logprobs;
  std::vector<int32_t> ids;  // position i's alternatives at [i * k, i * k + k)
  std::vector<float> top;
};

TEST_P(ScoreWindows, AlternativesAreEachPositionsMostLikelyTokens) {
  constexpr int32_t k = 4;
  constexpr int32_t stride = 20;
  photon_score_options* options = nullptr;
  ASSERT_EQ(photon_score_options_create(&options), PHOTON_OK);
  ASSERT_EQ(photon_score_options_set_stride(options, stride), PHOTON_OK);
  const auto score_top = [&](const std::vector<int32_t>& tokens) {
    Scored s{std::vector<float>(tokens.size()), std::vector<int32_t>(tokens.size() * k),
             std::vector<float>(tokens.size() * k)};
    EXPECT_EQ(photon_model_score_top(model_, tokens.data(), tokens.size(), options, k,
                                     s.logprobs.data(), s.ids.data(), s.top.data()),
              PHOTON_OK)
        << photon_last_error();
    return s;
  };
  const Scored all = score_top(tokens_);
  EXPECT_TRUE(same_bits(all.logprobs, score(tokens_, stride)));
  for (size_t j = 0; j < k; ++j) {
    EXPECT_EQ(all.ids[j], -1);
    EXPECT_TRUE(std::isnan(all.top[j]));
  }
  const int32_t vocab = photon_model_vocab_size(model_);
  size_t greedy = 0;
  for (size_t i = 1; i < tokens_.size(); ++i) {
    const int32_t* ids = &all.ids[i * k];
    const float* top = &all.top[i * k];
    bool listed = false;
    for (size_t j = 0; j < k; ++j) {
      ASSERT_TRUE(ids[j] >= 0 && ids[j] < vocab) << i;
      if (j > 0) {
        EXPECT_TRUE(top[j] < top[j - 1] || (top[j] == top[j - 1] && ids[j] > ids[j - 1])) << i;
      }
      if (ids[j] == tokens_[i]) {
        listed = true;
        EXPECT_EQ(top[j], all.logprobs[i]) << "position " << i;  // bit for bit
      }
    }
    // A token not among the alternatives is less likely than all of them.
    if (!listed) {
      EXPECT_LE(all.logprobs[i], top[k - 1]) << i;
    }
    greedy += ids[0] == tokens_[i];
    EXPECT_LE(all.logprobs[i], top[0]);
  }
  EXPECT_LT(greedy, tokens_.size() - 1);  // the sequence is not the model's own
  // Window by window: each window's alternatives are those of the window scored alone.
  for (const Window& w : layout(tokens_.size(), kContext, stride)) {
    const Scored part =
        score_top(std::vector<int32_t>(tokens_.begin() + w.begin, tokens_.begin() + w.end));
    for (size_t i = std::max<size_t>(w.first_scored, 1); i < w.end; ++i)
      for (size_t j = 0; j < k; ++j) {
        EXPECT_EQ(all.ids[i * k + j], part.ids[(i - w.begin) * k + j]) << i;
        EXPECT_EQ(all.top[i * k + j], part.top[(i - w.begin) * k + j]) << i;
      }
  }
  photon_score_options_free(options);
}

TEST_P(ScoreWindows, AlternativesRefuseWhatTheyCannotGive) {
  std::vector<float> logprobs(tokens_.size());
  std::vector<int32_t> ids(tokens_.size() * 2);
  std::vector<float> top(ids.size());
  const int32_t vocab = photon_model_vocab_size(model_);
  for (const int32_t k : {0, -1, vocab + 1}) {
    EXPECT_EQ(photon_model_score_top(model_, tokens_.data(), tokens_.size(), nullptr, k,
                                     logprobs.data(), ids.data(), top.data()),
              PHOTON_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(photon_last_error()).find("k is " + std::to_string(k)),
              std::string::npos);
  }
  EXPECT_EQ(photon_model_score_top(model_, tokens_.data(), tokens_.size(), nullptr, 2,
                                   logprobs.data(), nullptr, top.data()),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("top_tokens is NULL"), std::string::npos);
  if (GetParam() < 2) return;
  photon_score_options* options = nullptr;
  ASSERT_EQ(photon_score_options_create(&options), PHOTON_OK);
  ASSERT_EQ(photon_score_options_set_mode(options, PHOTON_MODE_RECGEN), PHOTON_OK);
  EXPECT_EQ(photon_model_score_top(model_, tokens_.data(), tokens_.size(), options, 2,
                                   logprobs.data(), ids.data(), top.data()),
            PHOTON_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(photon_last_error()).find("teacher-forced scoring only"),
            std::string::npos);
  photon_score_options_free(options);
}

INSTANTIATE_TEST_SUITE_P(Models, ScoreWindows, ::testing::Values(0, 1, 2),
                         [](const auto& param_info) {
                           return param_info.param == 0
                                      ? std::string("Vanilla")
                                      : "Photon" + std::to_string(param_info.param);
                         });

}  // namespace
