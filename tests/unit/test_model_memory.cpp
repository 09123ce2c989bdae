// photon_model_memory: what a model's backend holds. A session's caches count from its creation
// for its whole context (checked against the cache's size from the configuration), are returned
// when it is freed, and the peak follows sqlite3_status64's rules.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "photon.h"
#include "test_models.h"

namespace {

struct Use {
  uint64_t in_use = 0, peak = 0;
};

class ModelMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = photon::testing::scratch_model_path("test_model_memory");
    photon::testing::write_test_model(config_, path_, 3);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  Use memory(bool reset_peak = false) {
    Use use;
    EXPECT_EQ(photon_model_memory(model_, &use.in_use, &use.peak, reset_peak ? 1 : 0), PHOTON_OK);
    return use;
  }

  photon_session* session(int32_t context) {
    photon_session_options* options = nullptr;
    EXPECT_EQ(photon_session_options_create(&options), PHOTON_OK);
    EXPECT_EQ(photon_session_options_set_context_length(options, context), PHOTON_OK);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, options, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(options);
    return s;
  }

  // K and V of every layer for `context` positions, f32.
  uint64_t kv_capacity_bytes(int32_t context) const {
    return uint64_t{2} * config_.stack.layers * config_.stack.kv_dim() * context * sizeof(float);
  }

  photon::ModelConfig config_ = photon::testing::tiny_vanilla();
  std::string path_;
  photon_model* model_ = nullptr;
};

TEST_F(ModelMemoryTest, SessionsCountTheirWholeContextUntilFreed) {
  const Use loaded = memory(true);
  EXPECT_EQ(loaded.peak, loaded.in_use);

  photon_session* small = session(64);
  const Use one = memory();
  EXPECT_GE(one.in_use - loaded.in_use, kv_capacity_bytes(64));
  photon_session* large = session(192);
  const Use two = memory();
  // The two sessions differ only in their caches' length.
  EXPECT_EQ((two.in_use - one.in_use) - (one.in_use - loaded.in_use),
            kv_capacity_bytes(192) - kv_capacity_bytes(64));
  EXPECT_EQ(two.peak, two.in_use);

  photon_session_free(large);
  photon_session_free(small);
  const Use freed = memory();
  EXPECT_EQ(freed.in_use, loaded.in_use);
  EXPECT_EQ(freed.peak, two.in_use);  // the peak stays until reset
  EXPECT_EQ(memory(true).peak, two.in_use);
  EXPECT_EQ(memory().peak, freed.in_use);  // restarted from what is in use
}

TEST_F(ModelMemoryTest, GenerationWorkspacesShowInThePeak) {
  const Use loaded = memory(true);
  photon_session* s = session(128);
  const std::vector<int32_t> prompt = {1, 7, 9, 30, 41, 5, 77, 12};
  ASSERT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(s, 8, nullptr, nullptr, nullptr), PHOTON_OK);
  const Use running = memory();
  EXPECT_GT(running.in_use, loaded.in_use + kv_capacity_bytes(128));
  photon_session_free(s);
  const Use after = memory();
  EXPECT_LT(after.in_use, running.in_use);
  EXPECT_GE(after.peak, running.in_use);
}

TEST(ModelMemory, RefusesANullModel) {
  uint64_t in_use = 7, peak = 7;
  EXPECT_EQ(photon_model_memory(nullptr, &in_use, &peak, 0), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("photon_model_memory"), std::string::npos);
  EXPECT_EQ(in_use, 7u);
  EXPECT_EQ(peak, 7u);
}

TEST_F(ModelMemoryTest, AcceptsNullOutputs) {
  EXPECT_EQ(photon_model_memory(model_, nullptr, nullptr, 1), PHOTON_OK);
}

}  // namespace
