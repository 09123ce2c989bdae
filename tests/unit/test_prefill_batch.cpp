// photon_session_prefill_batch against photon_session_prefill, session by session: the same saved
// state (every cache, bit for bit) and the same tokens afterwards, for every architecture and
// mode, prompts shorter and longer than a slice, several passes, second prefills and a RecGen
// continuation after generation; and its argument checks, which leave every session unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::collect;
using photon::testing::Generated;

class PrefillBatch : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else the number of PHOTON levels. A context of 1,600 tokens lets the
  // prompts below span several slices and the batch several passes.
  void SetUp() override {
    const int levels = GetParam();
    photon::ModelConfig config =
        levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels);
    config.max_seq_len = 1600;
    path_ = photon::testing::scratch_model_path("test_prefill_batch_" + std::to_string(levels));
    photon::testing::write_test_model(config, path_, 11 + levels);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
    levels_ = levels;
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  // Session i of a batch: HierGen and RecGen alternate where the model has both.
  photon_session* session(int i) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(
        o, levels_ >= 2 ? (i % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN) : PHOTON_MODE_AUTO);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  static std::vector<int32_t> prompt(size_t n, int seed, bool bos) {
    std::vector<int32_t> t;
    for (size_t i = 0; i < n; ++i)
      t.push_back(bos && i == 0 ? 1 : 3 + static_cast<int32_t>((i * 37 + seed * 101) % 500));
    return t;
  }

  static std::string saved(photon_session* s) {
    size_t size = 0;
    EXPECT_EQ(photon_session_save(s, nullptr, 0, &size), PHOTON_ERR_BUFFER_TOO_SMALL);
    std::string bytes(size, '\0');
    EXPECT_EQ(photon_session_save(s, bytes.data(), bytes.size(), &size), PHOTON_OK)
        << photon_last_error();
    return bytes;
  }

  static Generated generate(photon_session* s, int n) {
    Generated g;
    EXPECT_EQ(photon_session_generate(s, n, collect, &g, nullptr), PHOTON_OK)
        << photon_last_error();
    return g;
  }

  photon_model* model_ = nullptr;
  std::string path_;
  int levels_ = 0;
};

TEST_P(PrefillBatch, EachSessionEndsAsIfPrefilledAlone) {
  // Lengths around the slice and the CPU's pass (512 tokens each); session 1 already holds a
  // prompt (a second prefill), session 3 has generated after its prompt (a RecGen continuation),
  // session 8 holds a prompt and gets no tokens.
  const std::vector<size_t> lengths = {1, 700, 45, 1030, 513, 8, 1100, 64, 0, 900, 3};
  const size_t n = lengths.size();
  std::vector<photon_session*> batch, alone;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < n; ++i) {
    batch.push_back(session(static_cast<int>(i)));
    alone.push_back(session(static_cast<int>(i)));
    const bool before = i == 1 || i == 3 || i == 8;
    if (before) {
      const std::vector<int32_t> first = prompt(37, 100 + static_cast<int>(i), true);
      for (photon_session* s : {batch[i], alone[i]}) {
        ASSERT_EQ(photon_session_prefill(s, first.data(), first.size()), PHOTON_OK);
        if (i == 3) generate(s, 6);
      }
    }
    prompts.push_back(prompt(lengths[i], static_cast<int>(i), !before));
  }
  std::vector<const int32_t*> tokens;
  std::vector<size_t> counts;
  for (const std::vector<int32_t>& p : prompts) {
    tokens.push_back(p.empty() ? nullptr : p.data());
    counts.push_back(p.size());
  }
  ASSERT_EQ(photon_session_prefill_batch(batch.data(), n, tokens.data(), counts.data()), PHOTON_OK)
      << photon_last_error();
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(photon_session_prefill(alone[i], prompts[i].data(), prompts[i].size()), PHOTON_OK)
        << photon_last_error();

  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("session " + std::to_string(i));
    EXPECT_EQ(photon_session_position(batch[i]), photon_session_position(alone[i]));
    EXPECT_TRUE(saved(batch[i]) == saved(alone[i])) << "the saved states differ";
    const Generated a = generate(batch[i], 12), b = generate(alone[i], 12);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.logprobs, b.logprobs);
  }
  for (size_t i = 0; i < n; ++i) {
    photon_session_free(batch[i]);
    photon_session_free(alone[i]);
  }
}

// RecGen prompts of more tokens than one of its prefill groups holds (16 passes: 8,192 tokens on
// the CPU) are encoded in several groups, each session as if prefilled alone.
TEST_P(PrefillBatch, RecGenPromptsBeyondOneGroupEndAsIfPrefilledAlone) {
  if (levels_ < 2) GTEST_SKIP() << "RecGen needs two levels";
  constexpr size_t kSessions = 8;
  std::vector<photon_session*> batch, alone;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<const int32_t*> tokens;
  std::vector<size_t> counts;
  size_t total = 0;
  for (size_t i = 0; i < kSessions; ++i) {
    // Odd indices are RecGen sessions (session()).
    batch.push_back(session(2 * static_cast<int>(i) + 1));
    alone.push_back(session(2 * static_cast<int>(i) + 1));
    prompts.push_back(prompt(1100 + 53 * i, static_cast<int>(i), true));
    total += prompts.back().size();
  }
  ASSERT_GT(total, size_t{16 * 512});
  for (const std::vector<int32_t>& p : prompts) {
    tokens.push_back(p.data());
    counts.push_back(p.size());
  }
  ASSERT_EQ(photon_session_prefill_batch(batch.data(), kSessions, tokens.data(), counts.data()),
            PHOTON_OK)
      << photon_last_error();
  for (size_t i = 0; i < kSessions; ++i) {
    SCOPED_TRACE("session " + std::to_string(i));
    ASSERT_EQ(photon_session_prefill(alone[i], prompts[i].data(), prompts[i].size()), PHOTON_OK);
    EXPECT_TRUE(saved(batch[i]) == saved(alone[i])) << "the saved states differ";
    const Generated a = generate(batch[i], 12), b = generate(alone[i], 12);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.logprobs, b.logprobs);
    photon_session_free(batch[i]);
    photon_session_free(alone[i]);
  }
}

TEST_P(PrefillBatch, BadArgumentsLeaveEverySessionUnchanged) {
  photon_session* sessions[3] = {session(0), session(1), session(2)};
  const std::vector<int32_t> good = prompt(20, 1, true), bad = {1, 5, 512, 7};
  const std::vector<int32_t> long_prompt = prompt(1601, 2, true);
  const int32_t* tokens[3] = {good.data(), bad.data(), good.data()};
  const size_t counts[3] = {good.size(), bad.size(), good.size()};
  EXPECT_EQ(photon_session_prefill_batch(sessions, 3, tokens, counts), PHOTON_ERR_BAD_TOKEN);
  EXPECT_EQ(std::string(photon_last_error()),
            "photon_session_prefill_batch: session 1: token 512 at position 2 is outside the "
            "vocabulary [0, 512)");
  for (photon_session* s : sessions) EXPECT_EQ(photon_session_position(s), 0);

  const int32_t* too_long[3] = {good.data(), good.data(), long_prompt.data()};
  const size_t long_counts[3] = {good.size(), good.size(), long_prompt.size()};
  EXPECT_EQ(photon_session_prefill_batch(sessions, 3, too_long, long_counts),
            PHOTON_ERR_CONTEXT_FULL);
  EXPECT_NE(std::string(photon_last_error()).find("session 2: 0 + 1601 tokens exceed"),
            std::string::npos)
      << photon_last_error();
  for (photon_session* s : sessions) EXPECT_EQ(photon_session_position(s), 0);

  photon_session* twice[2] = {sessions[0], sessions[0]};
  EXPECT_EQ(photon_session_prefill_batch(twice, 2, tokens, counts), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(photon_last_error()),
            "photon_session_prefill_batch: session 1 appears twice");
  const int32_t* missing[3] = {good.data(), nullptr, good.data()};
  EXPECT_EQ(photon_session_prefill_batch(sessions, 3, missing, counts),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(photon_last_error()),
            "photon_session_prefill_batch: tokens of session 1 is NULL");
  EXPECT_EQ(photon_session_prefill_batch(sessions, 3, nullptr, counts),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_session_prefill_batch(nullptr, 0, nullptr, nullptr), PHOTON_OK);
  for (photon_session* s : sessions) {
    EXPECT_EQ(photon_session_position(s), 0);
    photon_session_free(s);
  }
}

// A cancellation that stops a prefill between slices (or a batch between passes) leaves each
// HierGen or vanilla session as if it had been prefilled with the tokens it kept: the windows a
// slice skips because more follow are rebuilt before the call returns. The cancel comes from
// another thread after a delay; delays are spread over an uncancelled prefill's time until both
// calls have been stopped part-way, and every outcome is checked.
TEST_P(PrefillBatch, CancelledPartWayEndsAsIfPrefilledWithWhatItKept) {
  // Even indices are HierGen sessions (session()); three slices each, one session a pass.
  const std::vector<std::vector<int32_t>> prompts = {prompt(1500, 1, true), prompt(1400, 2, true)};
  auto run = [&](bool batch, std::chrono::microseconds delay) {
    std::vector<photon_session*> sessions = {session(0), session(2)};
    std::vector<const int32_t*> tokens;
    std::vector<size_t> counts;
    for (const std::vector<int32_t>& p : prompts) {
      tokens.push_back(p.data());
      counts.push_back(batch || counts.empty() ? p.size() : 0);
    }
    const auto started = std::chrono::steady_clock::now();
    std::thread canceller;
    if (delay.count() > 0)
      canceller = std::thread([&] {
        std::this_thread::sleep_for(delay);
        for (photon_session* s : sessions) photon_session_cancel(s);
      });
    const photon_status status =
        batch ? photon_session_prefill_batch(sessions.data(), 2, tokens.data(), counts.data())
              : photon_session_prefill(sessions[0], tokens[0], counts[0]);
    const auto took = std::chrono::steady_clock::now() - started;
    if (canceller.joinable()) canceller.join();
    EXPECT_TRUE(status == PHOTON_OK || status == PHOTON_ERR_CANCELLED) << photon_last_error();
    bool part_way = false;
    for (size_t i = 0; i < sessions.size(); ++i) {
      const int64_t kept = photon_session_position(sessions[i]);
      part_way |= kept > 0 && kept < static_cast<int64_t>(counts[i]);
      if (status == PHOTON_OK) continue;  // a cancel still pending would stop the generation
      SCOPED_TRACE("session " + std::to_string(i) + ", " + std::to_string(kept) + " tokens kept");
      photon_session* alone = session(2 * static_cast<int>(i));
      EXPECT_EQ(photon_session_prefill(alone, prompts[i].data(), static_cast<size_t>(kept)),
                PHOTON_OK);
      EXPECT_TRUE(saved(sessions[i]) == saved(alone)) << "the saved states differ";
      if (kept > 0) {
        const Generated a = generate(sessions[i], 8), b = generate(alone, 8);
        EXPECT_EQ(a.tokens, b.tokens);
        EXPECT_EQ(a.logprobs, b.logprobs);
      }
      photon_session_free(alone);
    }
    for (photon_session* s : sessions) photon_session_free(s);
    return std::make_pair(part_way, took);
  };
  for (const bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "photon_session_prefill_batch" : "one session");
    const auto whole = std::chrono::duration_cast<std::chrono::microseconds>(
        run(batch, std::chrono::microseconds(0)).second);
    bool stopped_part_way = false;
    for (int attempt = 1; attempt <= 24 && !stopped_part_way; ++attempt)
      stopped_part_way = run(batch, whole * (attempt % 8 + 1) / 10).first;
    EXPECT_TRUE(stopped_part_way) << "no cancellation landed between slices in 24 tries";
  }
}

std::string ModelName(const ::testing::TestParamInfo<int>& param) {
  return param.param == 0 ? "vanilla" : "photon_L" + std::to_string(param.param);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefillBatch, ::testing::Values(0, 1, 2, 3), ModelName);

}  // namespace
