// How the tests judge a reduced-precision way of computing the shipped trained model
// (models/photon-kjv.photon) against the exact one, as users judge such modes: the perplexity of a
// held passage, and how many greedy tokens two loaded models agree on. Shared by the CPU test of
// bf16 precision (test_precision.cpp) and its GPU counterpart (tests/gpu/test_models.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "photon.h"
#include "test_generated.h"

namespace photon::testing {

inline const std::string kTrainedModelPath = PHOTON_SOURCE_DIR "/models/photon-kjv.photon";

// Twenty openings in the corpus's style, the prompts of the greedy comparisons.
inline const std::vector<std::string> kTrainedModelPrompts = {
    "In the beginning",    "And God said",         "The LORD is my shepherd",
    "Blessed are the",     "And it came to pass",  "For God so loved",
    "Now the serpent was", "And the earth was",    "Honour thy father",
    "Thou shalt not",      "And Moses said unto",  "Then Jesus said unto them",
    "The heavens declare", "Wisdom is the",        "And he went up",
    "Behold, I stand at",  "In my Father's house", "And the children of Israel",
    "Let there be",        "Vanity of vanities"};

// A passage for perplexity (Ecclesiastes 1:2-11, King James Version).
inline const char* const kTrainedModelPassage =
    "Vanity of vanities, saith the Preacher, vanity of vanities; all is vanity. What profit hath "
    "a man of all his labour which he taketh under the sun? One generation passeth away, and "
    "another generation cometh: but the earth abideth for ever. The sun also ariseth, and the sun "
    "goeth down, and hasteth to his place where he arose. The wind goeth toward the south, and "
    "turneth about unto the north; it whirleth about continually, and the wind returneth again "
    "according to his circuits. All the rivers run into the sea; yet the sea is not full; unto "
    "the place from whence the rivers come, thither they return again. All things are full of "
    "labour; man cannot utter it: the eye is not satisfied with seeing, nor the ear filled with "
    "hearing. The thing that hath been, it is that which shall be; and that which is done is "
    "that which shall be done: and there is no new thing under the sun. Is there any thing "
    "whereof it may be said, See, this is new? it hath been already of old time, which was "
    "before us. There is no remembrance of former things; neither shall there be any remembrance "
    "of things that are to come with those that shall come after.";

inline std::vector<int32_t> tokenize_text(const photon_model* model, const std::string& text) {
  std::vector<int32_t> tokens(text.size() + 2);
  size_t n = 0;
  EXPECT_EQ(
      photon_model_tokenize(model, text.data(), text.size(), 1, tokens.data(), tokens.size(), &n),
      PHOTON_OK)
      << photon_last_error();
  tokens.resize(n);
  return tokens;
}

// exp(-mean log p) over every token after the first.
inline double perplexity(const photon_model* model, const std::string& text) {
  const std::vector<int32_t> tokens = tokenize_text(model, text);
  std::vector<float> logprobs(tokens.size());
  EXPECT_EQ(photon_model_score(model, tokens.data(), tokens.size(), logprobs.data()), PHOTON_OK)
      << photon_last_error();
  double sum = 0.0;
  for (size_t i = 1; i < logprobs.size(); ++i) sum += logprobs[i];
  return std::exp(-sum / static_cast<double>(logprobs.size() - 1));
}

struct GreedyAgreement {
  size_t equal = 0, positions = 0;  // positions where the two models chose the same token
  int identical = 0;                // prompts whose whole continuations are equal
  double fraction() const { return positions ? static_cast<double>(equal) / positions : 0.0; }
};

inline Generated greedy(const photon_model* model, const std::vector<int32_t>& prompt, int32_t n) {
  photon_session_options* options = nullptr;
  EXPECT_EQ(photon_session_options_create(&options), PHOTON_OK);
  photon_session_options_set_ignore_eos(options, 1);
  photon_session* session = nullptr;
  EXPECT_EQ(photon_session_create(model, options, &session), PHOTON_OK) << photon_last_error();
  photon_session_options_free(options);
  Generated out;
  EXPECT_EQ(photon_session_prefill(session, prompt.data(), prompt.size()), PHOTON_OK);
  EXPECT_EQ(photon_session_generate(session, n, &collect, &out, nullptr), PHOTON_OK)
      << photon_last_error();
  photon_session_free(session);
  return out;
}

// `tokens` greedy tokens after each of the prompts from both models, compared position by
// position.
inline GreedyAgreement greedy_agreement(const photon_model* a, const photon_model* b,
                                        int32_t tokens) {
  GreedyAgreement agreement;
  for (const std::string& text : kTrainedModelPrompts) {
    const std::vector<int32_t> prompt = tokenize_text(a, text);
    const Generated x = greedy(a, prompt, tokens), y = greedy(b, prompt, tokens);
    EXPECT_EQ(x.tokens.size(), static_cast<size_t>(tokens));
    EXPECT_EQ(y.tokens.size(), static_cast<size_t>(tokens));
    for (size_t i = 0; i < x.tokens.size() && i < y.tokens.size(); ++i)
      agreement.equal += x.tokens[i] == y.tokens[i];
    agreement.positions += static_cast<size_t>(tokens);
    agreement.identical += x.tokens == y.tokens;
  }
  return agreement;
}

// Expects `model` to keep the quality of `exact` (the same file at exact precision on the CPU):
// the passage's perplexity within 1%, greedy tokens equal at >= 90% of 64 positions after each
// prompt; prints the numbers, `label` naming the two. Returns (exact's, model's) perplexities.
inline std::pair<double, double> expect_quality_of(const photon_model* exact,
                                                   const photon_model* model,
                                                   const std::string& label) {
  const double want = perplexity(exact, kTrainedModelPassage);
  const double got = perplexity(model, kTrainedModelPassage);
  EXPECT_LE(std::fabs(got / want - 1.0), 0.01) << label << ": " << want << " against " << got;
  const GreedyAgreement agreement = greedy_agreement(exact, model, 64);
  EXPECT_GE(agreement.fraction(), 0.9) << label;
  std::printf(
      "[          ] %s: perplexity %.4f against %.4f; greedy tokens equal %.1f%% (%d of "
      "20 prompts identical)\n",
      label.c_str(), want, got, 100.0 * agreement.fraction(), agreement.identical);
  return {want, got};
}

}  // namespace photon::testing
