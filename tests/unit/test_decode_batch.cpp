// DecodeBatch (engine/decode.h): tasks of several modes join and leave a running batch between
// steps, each delivers what its session generates alone, and a removed session continues exactly
// as one that generated without interruption.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/decode.h"
#include "engine/model.h"
#include "engine/session.h"
#include "test_models.h"

namespace {

using photon::DecodeBatch;
using photon::DecodeTask;
using photon::Mode;
using photon::Session;

class DecodeBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = photon::testing::scratch_model_path("test_decode_batch");
    photon::testing::write_test_model(photon::testing::tiny_photon(2), path_, 61);
    model_ = photon::Model::load(path_, {});
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::unique_ptr<Session> session(Mode mode, int prompt_len, uint64_t seed) {
    photon::SamplerConfig sampler;
    sampler.temperature = 0.8f;
    sampler.top_k = 40;
    sampler.seed = seed;
    sampler.ignore_eos = true;
    auto s =
        Session::create(*model_, mode, model_->config().max_seq_len, sampler, photon::DType::F32);
    std::vector<int32_t> prompt;
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(i == 0 ? 1 : 3 + (i * 41 + 5) % 500);
    s->prefill(prompt, "test");
    return s;
  }

  // A sink that appends to `out`.
  static photon::TokenSink into(std::vector<int32_t>& out) {
    return [&out](const photon::DeliveredToken& t) {
      out.push_back(t.token);
      return true;
    };
  }

  // The tokens a session generates in one call, alone.
  std::vector<int32_t> alone(Mode mode, int prompt_len, uint64_t seed, int32_t n) {
    std::unique_ptr<Session> s = session(mode, prompt_len, seed);
    std::vector<int32_t> out;
    const photon::TokenSink sink = into(out);
    Session* one = s.get();
    photon::generate({&one, 1}, n, {&sink, 1}, "test", false);
    return out;
  }

  std::string path_;
  std::unique_ptr<photon::Model> model_;
};

TEST_F(DecodeBatchTest, TasksJoinAndLeaveBetweenSteps) {
  constexpr int32_t kTokens = 24;
  struct Spec {
    Mode mode;
    int prompt;
    uint64_t seed;
  };
  const Spec specs[] = {{Mode::RecGen, 7, 3}, {Mode::HierGen, 5, 4}, {Mode::RecGen, 10, 5}};
  std::vector<std::vector<int32_t>> expected, got(3);
  std::vector<std::unique_ptr<Session>> sessions;
  for (const Spec& s : specs) {
    expected.push_back(alone(s.mode, s.prompt, s.seed, kTokens));
    ASSERT_EQ(expected.back().size(), static_cast<size_t>(kTokens));
    sessions.push_back(session(s.mode, s.prompt, s.seed));
  }
  auto add = [&](DecodeBatch& batch, size_t i) {
    Session& s = *sessions[i];
    return batch.add(s, into(got[i]), static_cast<int64_t>(s.history.size()) + kTokens, kTokens);
  };

  DecodeBatch batch(*model_);
  std::map<uint64_t, DecodeTask> finished;
  auto step = [&] {
    for (DecodeTask& t : batch.step()) finished.emplace(t.id, std::move(t));
  };
  const uint64_t first = add(batch, 0);
  step();
  step();
  const uint64_t second = add(batch, 1);
  const uint64_t third = add(batch, 2);
  step();
  step();
  step();
  // The RecGen session has sampled its unit's later windows ahead of delivery: removing it drops
  // them, and its windows go back to what it delivered.
  ASSERT_FALSE(sessions[0]->stream.ahead.empty());
  const size_t delivered_first = got[0].size();
  batch.remove(first);
  EXPECT_TRUE(sessions[0]->stream.ahead.empty());
  while (!batch.empty()) step();

  ASSERT_EQ(finished.size(), 2u);
  for (uint64_t id : {second, third}) {
    EXPECT_EQ(finished.at(id).reason, PHOTON_STOP_LENGTH);
    EXPECT_EQ(finished.at(id).delivered, kTokens);
  }
  EXPECT_EQ(got[1], expected[1]);
  EXPECT_EQ(got[2], expected[2]);

  // The removed session continues as if it had not been interrupted.
  EXPECT_EQ(got[0].size(), delivered_first);
  std::vector<int32_t> rest;
  const photon::TokenSink sink = into(rest);
  Session* removed = sessions[0].get();
  photon::generate({&removed, 1}, kTokens - static_cast<int32_t>(delivered_first), {&sink, 1},
                   "test", false);
  got[0].insert(got[0].end(), rest.begin(), rest.end());
  EXPECT_EQ(got[0], expected[0]);
}

TEST_F(DecodeBatchTest, TasksStopByTheirOwnRules) {
  std::unique_ptr<Session> limited = session(Mode::HierGen, 4, 7);
  std::unique_ptr<Session> pulled = session(Mode::RecGen, 4, 8);
  std::vector<int32_t> a, b;
  DecodeBatch batch(*model_);
  const uint64_t by_limit =
      batch.add(*limited, into(a), static_cast<int64_t>(limited->history.size()) + 3, 100);
  const uint64_t by_count = batch.add(*pulled, into(b), pulled->context, 5);
  std::map<uint64_t, DecodeTask> finished;
  while (!batch.empty())
    for (DecodeTask& t : batch.step()) finished.emplace(t.id, std::move(t));
  EXPECT_EQ(finished.at(by_limit).reason, PHOTON_STOP_LENGTH);
  EXPECT_EQ(finished.at(by_limit).delivered, 3);
  EXPECT_EQ(limited->stream.stop_reason, PHOTON_STOP_LENGTH);
  EXPECT_EQ(finished.at(by_count).reason, PHOTON_STOP_NONE);
  EXPECT_EQ(finished.at(by_count).delivered, 5);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 5u);
}

}  // namespace
