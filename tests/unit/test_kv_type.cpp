// Sessions with 16-bit KV caches (photon_session_options_set_kv_type): every architecture and mode
// stays within the caches' rounding of the f32 session, holds half the bytes, saves and restores
// its type exactly, and batches with sessions of other types as each alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "photon.h"
#include "session_generated.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::collect;
using photon::testing::Generated;

struct Arch {
  int levels;  // 0: vanilla
  photon_mode mode;
};

const Arch kArchs[] = {{0, PHOTON_MODE_HIERGEN}, {1, PHOTON_MODE_HIERGEN}, {2, PHOTON_MODE_HIERGEN},
                       {2, PHOTON_MODE_RECGEN},  {3, PHOTON_MODE_HIERGEN}, {3, PHOTON_MODE_RECGEN}};

class KvType : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int levels : {0, 1, 2, 3}) {
      const std::string path =
          photon::testing::scratch_model_path("test_kv_type_" + std::to_string(levels));
      photon::testing::write_test_model(
          levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels),
          path, 300 + levels);
      photon_model* m = nullptr;
      ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &m), PHOTON_OK) << photon_last_error();
      std::remove(path.c_str());
      models_[levels] = m;
    }
  }
  static void TearDownTestSuite() {
    for (auto& m : models_) photon_model_free(m), m = nullptr;
  }

  static photon_session* make(const Arch& a, photon_dtype kv_type, float temperature = 0.0f) {
    photon_session_options* o = nullptr;
    photon_session_options_create(&o);
    photon_session_options_set_mode(o, a.mode);
    EXPECT_EQ(photon_session_options_set_kv_type(o, kv_type), PHOTON_OK) << photon_last_error();
    photon_session_options_set_temperature(o, temperature);
    photon_session_options_set_seed(o, 5);
    photon_session_options_set_ignore_eos(o, 1);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(models_[a.levels], o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }

  static std::vector<int32_t> prompt(int n, int salt = 0) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(i == 0 ? 1 : 3 + (i * 71 + 13 + salt) % 500);
    return p;
  }

  static std::vector<float> prefill_logprobs(photon_session* s, const std::vector<int32_t>& p) {
    std::vector<float> lp(p.size());
    EXPECT_EQ(photon_session_prefill_logprobs(s, p.data(), p.size(), lp.data()), PHOTON_OK)
        << photon_last_error();
    return lp;
  }

  static uint64_t kv_bytes(photon_session* s, int levels) {
    uint64_t total = 0;
    for (int l = 1; l <= std::max(levels, 1); ++l) {
      uint64_t encoder = 0, window = 0;
      EXPECT_EQ(photon_session_kv_bytes(s, l, &encoder, &window), PHOTON_OK) << photon_last_error();
      total += encoder + window;
    }
    return total;
  }

  static photon_model* models_[4];
};

photon_model* KvType::models_[4] = {};

// Greedy generation after a 24-token prompt: the log-probabilities of a 16-bit session differ
// from the f32 session's (compared while both have the same history), by no more than its
// rounding allows; its caches hold half the bytes. On these random models bf16 caches move
// log-probabilities by up to 8e-2 (RecGen, whose generated latents carry the rounding forward),
// f16 caches by up to 1e-2: 3 more bits, 8x less.
TEST_F(KvType, SixteenBitCachesStayWithinTheirRounding) {
  const std::vector<int32_t> p = prompt(24);
  for (const Arch& a : kArchs) {
    photon_session* exact = make(a, PHOTON_DTYPE_F32);
    ASSERT_EQ(photon_session_prefill(exact, p.data(), p.size()), PHOTON_OK);
    Generated want;
    ASSERT_EQ(photon_session_generate(exact, 40, collect, &want, nullptr), PHOTON_OK);
    const uint64_t exact_bytes = kv_bytes(exact, a.levels);
    EXPECT_EQ(photon_session_kv_type(exact), PHOTON_DTYPE_F32);
    for (const auto& [type, bound] :
         {std::pair{PHOTON_DTYPE_BF16, 0.15}, {PHOTON_DTYPE_F16, 0.02}}) {
      const std::string name = "L=" + std::to_string(a.levels) + " mode " + std::to_string(a.mode) +
                               " kv type " + std::to_string(type);
      photon_session* s = make(a, type);
      EXPECT_EQ(photon_session_kv_type(s), type) << name;
      ASSERT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK);
      Generated got;
      ASSERT_EQ(photon_session_generate(s, 40, collect, &got, nullptr), PHOTON_OK);
      double max_diff = 0;
      size_t compared = 0;
      for (; compared < want.tokens.size(); ++compared) {
        max_diff =
            std::max<double>(max_diff, std::abs(got.logprobs[compared] - want.logprobs[compared]));
        if (got.tokens[compared] != want.tokens[compared]) break;
      }
      EXPECT_GE(compared, 4u) << name;  // greedy paths may part where two tokens are close
      EXPECT_GT(max_diff, 0.0) << name << ": no rounding happened";
      EXPECT_LE(max_diff, bound) << name;
      std::printf("[          ] %s: max |logprob difference| %.2e over %zu tokens\n", name.c_str(),
                  max_diff, compared);
      EXPECT_EQ(kv_bytes(s, a.levels) * 2, exact_bytes) << name;
      photon_session_free(s);
    }
    photon_session_free(exact);
  }
}

// A saved 16-bit session restores with its type and continues with the bits the original
// produces; f32 states keep format version 1 (older builds read them), 16-bit ones are version 2
// and smaller.
TEST_F(KvType, SavedStatesKeepTheirTypeAndContinueExactly) {
  const std::vector<int32_t> p = prompt(21, 5);
  for (const Arch& a : kArchs) {
    const std::string name = "L=" + std::to_string(a.levels) + " mode " + std::to_string(a.mode);
    photon_session* original = make(a, PHOTON_DTYPE_BF16, 0.8f);
    ASSERT_EQ(photon_session_prefill(original, p.data(), p.size()), PHOTON_OK);
    Generated before;
    ASSERT_EQ(photon_session_generate(original, 9, collect, &before, nullptr), PHOTON_OK);
    const std::vector<uint8_t> blob = photon::testing::save_state(original);
    photon_session* restored = nullptr;
    ASSERT_EQ(photon_session_restore(models_[a.levels], blob.data(), blob.size(), &restored),
              PHOTON_OK)
        << photon_last_error();
    EXPECT_EQ(photon_session_kv_type(restored), PHOTON_DTYPE_BF16) << name;
    Generated want, got;
    ASSERT_EQ(photon_session_generate(original, 17, collect, &want, nullptr), PHOTON_OK);
    ASSERT_EQ(photon_session_generate(restored, 17, collect, &got, nullptr), PHOTON_OK);
    EXPECT_EQ(got.tokens, want.tokens) << name;
    EXPECT_EQ(got.logprobs, want.logprobs) << name;

    photon_session* exact = make(a, PHOTON_DTYPE_F32, 0.8f);
    ASSERT_EQ(photon_session_prefill(exact, p.data(), p.size()), PHOTON_OK);
    ASSERT_EQ(photon_session_generate(exact, 9, collect, &before, nullptr), PHOTON_OK);
    const std::vector<uint8_t> exact_blob = photon::testing::save_state(exact);
    const auto* state = photon::fb::GetSizePrefixedSessionState(blob.data());
    const auto* exact_state = photon::fb::GetSizePrefixedSessionState(exact_blob.data());
    EXPECT_EQ(state->format_version(), 3u) << name;
    EXPECT_EQ(state->kv_type(), photon::fb::KvType::BF16) << name;
    EXPECT_EQ(exact_state->format_version(), 3u) << name;
    EXPECT_EQ(exact_state->kv_type(), photon::fb::KvType::F32) << name;
    EXPECT_LT(blob.size(), exact_blob.size()) << name;
    for (auto* s : {original, restored, exact}) photon_session_free(s);
  }
}

// One batch of sessions of every kv type (and both modes), prefilled and generated together, gives
// each session what it gives alone.
TEST_F(KvType, MixedTypesBatchAsEachAlone) {
  const photon_dtype types[] = {PHOTON_DTYPE_BF16, PHOTON_DTYPE_F32, PHOTON_DTYPE_F16,
                                PHOTON_DTYPE_BF16};
  const Arch archs[] = {{3, PHOTON_MODE_RECGEN},
                        {3, PHOTON_MODE_RECGEN},
                        {3, PHOTON_MODE_HIERGEN},
                        {3, PHOTON_MODE_HIERGEN}};
  std::vector<Generated> alone(4);
  std::vector<photon_session*> sessions;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(prompt(7 + 5 * i, i));
    const std::vector<int32_t>& p = prompts.back();
    photon_session* a = make(archs[i], types[i], 0.9f);
    ASSERT_EQ(photon_session_prefill(a, p.data(), p.size()), PHOTON_OK);
    ASSERT_EQ(photon_session_generate(a, 30, collect, &alone[i], nullptr), PHOTON_OK);
    photon_session_free(a);
    sessions.push_back(make(archs[i], types[i], 0.9f));
  }
  ASSERT_EQ(photon::testing::prefill_batch(sessions, prompts), PHOTON_OK) << photon_last_error();
  std::vector<Generated> batched(4);
  std::vector<int32_t> counts(4);
  ASSERT_EQ(photon_session_generate_batch(sessions.data(), sessions.size(), 30,
                                          photon::testing::collect_batch, &batched, counts.data()),
            PHOTON_OK)
      << photon_last_error();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << "session " << i;
    ASSERT_EQ(batched[i].logprobs.size(), alone[i].logprobs.size()) << "session " << i;
    for (size_t k = 0; k < alone[i].logprobs.size(); ++k)
      EXPECT_NEAR(batched[i].logprobs[k], alone[i].logprobs[k], 1e-4) << "session " << i;
    photon_session_free(sessions[i]);
  }
}

TEST_F(KvType, RefusesUnknownTypes) {
  photon_session_options* o = nullptr;
  ASSERT_EQ(photon_session_options_create(&o), PHOTON_OK);
  EXPECT_EQ(photon_session_options_set_kv_type(o, static_cast<photon_dtype>(7)),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("kv_type 7"), std::string::npos)
      << photon_last_error();
  EXPECT_EQ(photon_session_options_set_kv_type(nullptr, PHOTON_DTYPE_BF16),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_session_kv_type(nullptr), PHOTON_DTYPE_F32);
  photon_session_options_free(o);
}

}  // namespace
