// Sessions: saved states resume exactly, refusals are specific and never crash, batched
// and pull decoding equal single-session decoding, cancellation works across threads, and 8 threads
// sharing one model give single-threaded results.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/session_state.h"
#include "format/data_hash.h"
#include "photon.h"
#include "session_generated.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::collect;
using photon::testing::Generated;
using photon::testing::save_state;

class SessionState : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int levels : {0, 2, 3}) {
      const std::string path =
          photon::testing::scratch_model_path("test_state_" + std::to_string(levels));
      photon::testing::write_test_model(
          levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels),
          path, 100 + levels);
      photon_model* m = nullptr;
      ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &m), PHOTON_OK) << photon_last_error();
      std::remove(path.c_str());  // the loaded model keeps its mapping
      models_[levels] = m;
    }
  }
  static void TearDownTestSuite() {
    for (auto& m : models_) photon_model_free(m), m = nullptr;
  }

  static photon_session* make(photon_model* model, photon_mode mode, uint64_t seed = 42,
                              float temperature = 0.8f) {
    photon_session_options* o = nullptr;
    photon_session_options_create(&o);
    photon_session_options_set_mode(o, mode);
    photon_session_options_set_temperature(o, temperature);
    photon_session_options_set_top_k(o, 40);
    photon_session_options_set_seed(o, seed);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  // `first` (a new session) prefilled with p, `split` tokens generated into *got, saved, freed
  // and restored: the restored session, or nullptr after a failed step.
  static photon_session* resumed_after(photon_model* model, photon_session* first,
                                       const std::vector<int32_t>& p, int split, Generated* got) {
    photon_session* resumed = nullptr;
    if (photon_session_prefill(first, p.data(), p.size()) == PHOTON_OK &&
        photon_session_generate(first, split, collect, got, nullptr) == PHOTON_OK) {
      const std::vector<uint8_t> blob = save_state(first);
      EXPECT_EQ(photon_session_restore(model, blob.data(), blob.size(), &resumed), PHOTON_OK)
          << photon_last_error();
    } else {
      ADD_FAILURE() << "prefill or generate before the save: " << photon_last_error();
    }
    photon_session_free(first);
    return resumed;
  }

  static std::vector<int32_t> prompt(int n) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(i == 0 ? 1 : 3 + (i * 53 + 7) % 500);
    return p;
  }

  static photon_model* models_[4];
};

photon_model* SessionState::models_[4] = {};

struct Case {
  int levels;
  photon_mode mode;
};

TEST_F(SessionState, ResumedSessionsContinueExactly) {
  const Case cases[] = {{0, PHOTON_MODE_HIERGEN},
                        {2, PHOTON_MODE_HIERGEN},
                        {2, PHOTON_MODE_RECGEN},
                        {3, PHOTON_MODE_HIERGEN},
                        {3, PHOTON_MODE_RECGEN}};
  for (const Case& c : cases) {
    photon_model* model = models_[c.levels];
    // tiny_photon(2): B_1 = 2, B_2 = 6; tiny_photon(3): B_3 = 12. Splits cover mid-chunk, chunk and
    // meta-context boundaries, for prompts that end mid-unit and on a boundary.
    for (int prompt_len : {5, 6, 12}) {
      const std::vector<int32_t> p = prompt(prompt_len);
      photon_session* whole = make(model, c.mode);
      ASSERT_EQ(photon_session_prefill(whole, p.data(), p.size()), PHOTON_OK);
      Generated expected;
      ASSERT_EQ(photon_session_generate(whole, 40, collect, &expected, nullptr), PHOTON_OK);
      photon_session_free(whole);
      for (int split : {0, 1, 3, 6, 7, 12, 19}) {
        Generated got;
        photon_session* resumed = resumed_after(model, make(model, c.mode), p, split, &got);
        ASSERT_NE(resumed, nullptr);
        EXPECT_EQ(photon_session_position(resumed), prompt_len + split);
        ASSERT_EQ(photon_session_generate(resumed, 40 - split, collect, &got, nullptr), PHOTON_OK);
        EXPECT_EQ(got.tokens, expected.tokens) << "levels " << c.levels << " mode " << c.mode
                                               << " prompt " << prompt_len << " split " << split;
        EXPECT_EQ(got.logprobs, expected.logprobs);
        photon_session_free(resumed);
      }
    }
  }
}

// A session saved before its first prefill restores (in every mode), and once prompted it
// generates what a new session does.
TEST_F(SessionState, ASessionSavedBeforeItsPromptRestoresAndContinuesAsANewOne) {
  const Case cases[] = {{0, PHOTON_MODE_HIERGEN},
                        {2, PHOTON_MODE_HIERGEN},
                        {2, PHOTON_MODE_RECGEN},
                        {3, PHOTON_MODE_RECGEN}};
  for (const Case& c : cases) {
    SCOPED_TRACE("levels " + std::to_string(c.levels) + " mode " + std::to_string(c.mode));
    photon_model* model = models_[c.levels];
    const std::vector<int32_t> p = prompt(7);
    photon_session* fresh = make(model, c.mode);
    ASSERT_EQ(photon_session_prefill(fresh, p.data(), p.size()), PHOTON_OK);
    Generated expected;
    ASSERT_EQ(photon_session_generate(fresh, 20, collect, &expected, nullptr), PHOTON_OK);
    photon_session_free(fresh);

    photon_session* empty = make(model, c.mode);
    const std::vector<uint8_t> blob = save_state(empty);
    photon_session_free(empty);
    photon_session* restored = nullptr;
    ASSERT_EQ(photon_session_restore(model, blob.data(), blob.size(), &restored), PHOTON_OK)
        << photon_last_error();
    EXPECT_EQ(photon_session_position(restored), 0);
    ASSERT_EQ(photon_session_prefill(restored, p.data(), p.size()), PHOTON_OK)
        << photon_last_error();
    Generated got;
    ASSERT_EQ(photon_session_generate(restored, 20, collect, &got, nullptr), PHOTON_OK);
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_EQ(got.logprobs, expected.logprobs);
    photon_session_free(restored);
  }
}

// Settings that only show late: min-p filters the draws, and a context shorter than the model's
// ends the run where it fills. A resumed session keeps both.
TEST_F(SessionState, ResumedSessionsKeepMinPAndTheirContext) {
  constexpr int32_t kContext = 30;
  const auto make_limited = [](photon_model* model, photon_mode mode) {
    photon_session_options* o = nullptr;
    photon_session_options_create(&o);
    photon_session_options_set_mode(o, mode);
    photon_session_options_set_temperature(o, 1.0f);
    photon_session_options_set_min_p(o, 0.2f);
    photon_session_options_set_seed(o, 9);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session_options_set_context_length(o, kContext);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  };
  const std::vector<int32_t> p = prompt(6);
  for (photon_mode mode : {PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN}) {
    photon_session* whole = make_limited(models_[2], mode);
    ASSERT_EQ(photon_session_prefill(whole, p.data(), p.size()), PHOTON_OK);
    Generated expected;
    ASSERT_EQ(photon_session_generate(whole, 40, collect, &expected, nullptr), PHOTON_OK);
    ASSERT_EQ(photon_session_stop_reason(whole), PHOTON_STOP_CONTEXT_FULL);
    ASSERT_EQ(expected.tokens.size(), static_cast<size_t>(kContext) - p.size());
    photon_session_free(whole);
    for (int split : {0, 5, 17}) {
      Generated got;
      photon_session* resumed =
          resumed_after(models_[2], make_limited(models_[2], mode), p, split, &got);
      ASSERT_NE(resumed, nullptr);
      ASSERT_EQ(photon_session_generate(resumed, 40 - split, collect, &got, nullptr), PHOTON_OK);
      EXPECT_EQ(got.tokens, expected.tokens) << "mode " << mode << " split " << split;
      EXPECT_EQ(photon_session_stop_reason(resumed), PHOTON_STOP_CONTEXT_FULL);
      photon_session_free(resumed);
    }
  }
}

TEST_F(SessionState, FilesRoundTripAndRecGenStatesStayCompact) {
  photon_model* model = models_[2];
  const std::vector<int32_t> p = prompt(60);
  std::vector<size_t> sizes;
  for (photon_mode mode : {PHOTON_MODE_RECGEN, PHOTON_MODE_HIERGEN}) {
    photon_session* s = make(model, mode);
    ASSERT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK);
    const std::string path = std::string(PHOTON_BINARY_DIR) + "/test_state.phss";
    ASSERT_EQ(photon_session_save_file(s, path.c_str()), PHOTON_OK) << photon_last_error();
    photon_session* r = nullptr;
    ASSERT_EQ(photon_session_restore_file(model, path.c_str(), &r), PHOTON_OK)
        << photon_last_error();
    EXPECT_EQ(photon_session_mode(r), mode);
    sizes.push_back(save_state(r).size());
    photon_session_free(s);
    photon_session_free(r);
    std::remove(path.c_str());
  }
  EXPECT_LT(sizes[0], sizes[1]) << "RecGen keeps only the top-level cache";
}

TEST_F(SessionState, RefusesForeignNewerDamagedAndTruncatedStates) {
  photon_session* s = make(models_[2], PHOTON_MODE_RECGEN);
  const std::vector<int32_t> p = prompt(9);
  ASSERT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(s, 5, nullptr, nullptr, nullptr), PHOTON_OK);
  const std::vector<uint8_t> blob = save_state(s);
  photon_session_free(s);

  auto restore = [&](photon_model* model, const std::vector<uint8_t>& b) {
    photon_session* out = nullptr;
    const photon_status st = photon_session_restore(model, b.data(), b.size(), &out);
    EXPECT_EQ(st == PHOTON_OK, out != nullptr) << "nothing is half-restored";
    photon_session_free(out);
    return st;
  };
  EXPECT_EQ(restore(models_[2], blob), PHOTON_OK);
  EXPECT_EQ(restore(models_[3], blob), PHOTON_ERR_WRONG_MODEL);
  EXPECT_NE(std::string(photon_last_error()).find("different model"), std::string::npos);

  std::vector<uint8_t> newer = blob;
  auto* state = photon::fb::GetMutableSizePrefixedSessionState(newer.data());
  ASSERT_TRUE(state->mutate_format_version(photon::kSessionFormatVersion + 1));
  const uint64_t hash = photon::hash_data_section(newer.data(), newer.size() - 8);
  for (int i = 0; i < 8; ++i) newer[newer.size() - 8 + i] = static_cast<uint8_t>(hash >> (8 * i));
  EXPECT_EQ(restore(models_[2], newer), PHOTON_ERR_UNSUPPORTED_VERSION);

  std::vector<uint8_t> not_state(blob.size(), 0x41);
  EXPECT_EQ(restore(models_[2], not_state), PHOTON_ERR_BAD_IDENTIFIER);
  EXPECT_EQ(restore(models_[2], std::vector<uint8_t>(blob.begin(), blob.begin() + blob.size() / 2)),
            PHOTON_ERR_TRUNCATED);

  // Flip bits and truncate at many points: always a specific refusal, never a crash.
  for (size_t at = 0; at < blob.size(); at += 1 + at / 16) {
    std::vector<uint8_t> damaged = blob;
    damaged[at] ^= static_cast<uint8_t>(1u << (at % 8));
    const photon_status st = restore(models_[2], damaged);
    EXPECT_TRUE(st == PHOTON_ERR_CORRUPT || st == PHOTON_ERR_TRUNCATED ||
                st == PHOTON_ERR_BAD_IDENTIFIER)
        << "flip at " << at << ": " << photon_status_name(st);
    const std::vector<uint8_t> cut(blob.begin(), blob.begin() + at);
    const photon_status cst = restore(models_[2], cut);
    EXPECT_TRUE(cst == PHOTON_ERR_TRUNCATED || cst == PHOTON_ERR_BAD_IDENTIFIER) << "cut at " << at;
  }
}

TEST_F(SessionState, BatchAndPullEqualSingleSessions) {
  photon_model* model = models_[2];
  const photon_mode modes[] = {PHOTON_MODE_RECGEN,  PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN,
                               PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN,  PHOTON_MODE_RECGEN};
  const int lengths[] = {1, 5, 6, 11, 13, 20};
  std::vector<Generated> alone(6), batched(6), pulled(6);
  std::vector<photon_session*> sessions;
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> p = prompt(lengths[i]);
    photon_session* a = make(model, modes[i], 7 + i, i == 4 ? 0.0f : 0.9f);
    ASSERT_EQ(photon_session_prefill(a, p.data(), p.size()), PHOTON_OK);
    ASSERT_EQ(photon_session_generate(a, 25 + i, collect, &alone[i], nullptr), PHOTON_OK);
    photon_session_free(a);
    photon_session* b = make(model, modes[i], 7 + i, i == 4 ? 0.0f : 0.9f);
    ASSERT_EQ(photon_session_prefill(b, p.data(), p.size()), PHOTON_OK);
    sessions.push_back(b);
    photon_session* c = make(model, modes[i], 7 + i, i == 4 ? 0.0f : 0.9f);
    ASSERT_EQ(photon_session_prefill(c, p.data(), p.size()), PHOTON_OK);
    for (int k = 0; k < 25 + i; ++k) {
      int32_t token = -1;
      char piece[64];
      size_t len = 0;
      float lp = 0;
      ASSERT_EQ(photon_session_next_token(c, &token, piece, sizeof piece, &len, &lp), PHOTON_OK)
          << photon_last_error();
      ASSERT_GE(token, 0);
      pulled[i].tokens.push_back(token);
      pulled[i].logprobs.push_back(lp);
    }
    photon_session_free(c);
  }
  // Each session stops at its own budget: stop the longer ones through the callback.
  struct Batch {
    std::vector<Generated>* runs;
  } batch{&batched};
  auto on_token = [](void* user, size_t index, int32_t token, const char*, size_t, float lp) {
    auto& run = (*static_cast<Batch*>(user)->runs)[index];
    run.tokens.push_back(token);
    run.logprobs.push_back(lp);
    return static_cast<int>(run.tokens.size()) >= 25 + static_cast<int>(index) ? 1 : 0;
  };
  std::vector<int32_t> counts(6);
  ASSERT_EQ(photon_session_generate_batch(sessions.data(), sessions.size(), 100, on_token, &batch,
                                          counts.data()),
            PHOTON_OK)
      << photon_last_error();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(counts[i], 25 + i);
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << "session " << i;
    EXPECT_EQ(pulled[i].tokens, alone[i].tokens) << "session " << i;
    ASSERT_EQ(alone[i].logprobs.size(), static_cast<size_t>(25 + i)) << "session " << i;
    ASSERT_EQ(batched[i].logprobs.size(), alone[i].logprobs.size()) << "session " << i;
    ASSERT_EQ(pulled[i].logprobs.size(), alone[i].logprobs.size()) << "session " << i;
    for (size_t k = 0; k < alone[i].logprobs.size(); ++k) {
      EXPECT_NEAR(batched[i].logprobs[k], alone[i].logprobs[k], 1e-4) << "session " << i;
      EXPECT_NEAR(pulled[i].logprobs[k], alone[i].logprobs[k], 1e-4) << "session " << i;
    }
    EXPECT_EQ(photon_session_stop_reason(sessions[i]), PHOTON_STOP_CALLBACK);
    photon_session_free(sessions[i]);
  }
}

TEST_F(SessionState, BatchRefusesMixedModelsAndDuplicates) {
  photon_session* a = make(models_[2], PHOTON_MODE_RECGEN);
  photon_session* b = make(models_[3], PHOTON_MODE_RECGEN);
  const std::vector<int32_t> p = prompt(3);
  photon_session_prefill(a, p.data(), p.size());
  photon_session_prefill(b, p.data(), p.size());
  photon_session* mixed[] = {a, b};
  EXPECT_EQ(photon_session_generate_batch(mixed, 2, 4, nullptr, nullptr, nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  photon_session* twice[] = {a, a};
  EXPECT_EQ(photon_session_generate_batch(twice, 2, 4, nullptr, nullptr, nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("twice"), std::string::npos);
  photon_session_free(a);
  photon_session_free(b);
}

TEST_F(SessionState, CancelFromAnotherThreadLeavesAValidSession) {
  photon_model* model = models_[3];
  photon_session* s = make(model, PHOTON_MODE_HIERGEN);
  const std::vector<int32_t> p = prompt(4);
  ASSERT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK);
  // The third token's callback waits until the other thread has cancelled, so that the cancel
  // lands mid-generation however the threads are scheduled (a small model generates 200 tokens
  // before a busy machine runs the other thread).
  struct Progress {
    std::atomic<int> seen{0};
    std::atomic<bool> cancelled{false};
  } progress;
  auto count = [](void* user, int32_t, const char*, size_t, float) {
    auto* state = static_cast<Progress*>(user);
    if (state->seen.fetch_add(1) + 1 == 3)
      while (!state->cancelled.load()) std::this_thread::yield();
    return 0;
  };
  std::thread canceller([&] {
    while (progress.seen.load() < 3) std::this_thread::yield();
    photon_session_cancel(s);
    progress.cancelled.store(true);
  });
  int32_t n = 0;
  ASSERT_EQ(photon_session_generate(s, 200, count, &progress, &n), PHOTON_OK);
  canceller.join();
  EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_CANCELLED);
  EXPECT_LT(n, 200);
  EXPECT_EQ(photon_session_position(s), 4 + n);
  // Still valid: it saves, restores and continues.
  const std::vector<uint8_t> blob = save_state(s);
  photon_session* r = nullptr;
  ASSERT_EQ(photon_session_restore(model, blob.data(), blob.size(), &r), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(r, 5, nullptr, nullptr, &n), PHOTON_OK);
  EXPECT_EQ(n, 5);
  photon_session_free(r);
  photon_session_free(s);
}

TEST_F(SessionState, EightThreadsOnOneModelMatchASingleThread) {
  photon_model* model = models_[2];
  auto work = [&](int id, Generated* out) {
    const std::vector<int32_t> p = prompt(3 + id);
    photon_session* s = make(model, id % 2 ? PHOTON_MODE_HIERGEN : PHOTON_MODE_RECGEN, id);
    photon_session_prefill(s, p.data(), p.size());
    photon_session_generate(s, 9, collect, out, nullptr);
    const std::vector<uint8_t> blob = save_state(s);
    photon_session* r = nullptr;
    photon_session_restore(model, blob.data(), blob.size(), &r);
    photon_session_generate(r, 14, collect, out, nullptr);
    std::vector<float> lp(p.size());
    photon_model_score(model, p.data(), p.size(), lp.data());
    out->logprobs.insert(out->logprobs.end(), lp.begin() + 1, lp.end());
    photon_session_free(r);
    photon_session_free(s);
  };
  std::vector<Generated> serial(8), parallel(8);
  for (int i = 0; i < 8; ++i) work(i, &serial[i]);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    parallel.assign(8, {});
    for (int i = 0; i < 8; ++i) threads.emplace_back(work, i, &parallel[i]);
    for (auto& t : threads) t.join();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(parallel[i].tokens, serial[i].tokens) << "thread " << i;
      EXPECT_EQ(parallel[i].logprobs, serial[i].logprobs) << "thread " << i;
      EXPECT_EQ(serial[i].tokens.size(), 23u);
    }
  }
}

}  // namespace
