// The serving engine (photon_engine_*, photon_request_*) against the session alone: every
// request's tokens and log-probabilities equal those of a session created with its options, given
// its prompt and generating with photon_session_generate, whatever joins or leaves beside it, how
// its prompt is chunked, and whether it is paused; and the engine's limits, cancellation,
// statistics and threading rules as photon.h states them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::collect;
using photon::testing::Generated;

// What a request asks for, as the test describes it.
struct Ask {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  photon_mode mode = PHOTON_MODE_AUTO;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
  float temperature = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = true;
  int32_t top_logprobs = 0;
};

std::vector<int32_t> prompt(size_t n, int seed) {
  std::vector<int32_t> t{1};
  for (size_t i = 1; i < n; ++i) t.push_back(3 + static_cast<int32_t>((i * 37 + seed * 101) % 500));
  return t;
}

photon_session_options* session_options(const Ask& a) {
  photon_session_options* o = nullptr;
  EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
  photon_session_options_set_mode(o, a.mode);
  photon_session_options_set_kv_type(o, a.kv_type);
  photon_session_options_set_temperature(o, a.temperature);
  photon_session_options_set_seed(o, a.seed);
  photon_session_options_set_ignore_eos(o, a.ignore_eos ? 1 : 0);
  photon_session_options_set_top_logprobs(o, a.top_logprobs);
  return o;
}

// The request run alone: the reference every engine run must equal.
Generated alone(const photon_model* model, const Ask& a, photon_stop_reason* reason = nullptr) {
  photon_session_options* o = session_options(a);
  photon_session* s = nullptr;
  EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
  photon_session_options_free(o);
  EXPECT_EQ(photon_session_prefill(s, a.prompt.data(), a.prompt.size()), PHOTON_OK)
      << photon_last_error();
  Generated g;
  EXPECT_EQ(photon_session_generate(s, a.max_tokens, collect, &g, nullptr), PHOTON_OK)
      << photon_last_error();
  if (reason) *reason = photon_session_stop_reason(s);
  photon_session_free(s);
  return g;
}

photon_request* submit(photon_engine* engine, const Ask& a, Generated* out) {
  photon_request_options* o = nullptr;
  EXPECT_EQ(photon_request_options_create(&o), PHOTON_OK);
  photon_session_options* so = session_options(a);
  EXPECT_EQ(photon_request_options_set_session_options(o, so), PHOTON_OK);
  photon_session_options_free(so);
  EXPECT_EQ(photon_request_options_set_prompt(o, a.prompt.data(), a.prompt.size()), PHOTON_OK);
  EXPECT_EQ(photon_request_options_set_max_tokens(o, a.max_tokens), PHOTON_OK);
  if (out) {
    EXPECT_EQ(photon_request_options_set_callback(o, collect, out), PHOTON_OK);
  }
  photon_request* r = nullptr;
  EXPECT_EQ(photon_engine_submit(engine, o, &r), PHOTON_OK) << photon_last_error();
  photon_request_options_free(o);
  return r;
}

photon_engine* make_engine(const photon_model* model, int32_t max_running = 64,
                           int32_t max_waiting = 1024, uint64_t budget = 0,
                           int32_t step_tokens = 512, uint64_t prefix_cache = 0) {
  photon_engine_options* o = nullptr;
  EXPECT_EQ(photon_engine_options_create(&o), PHOTON_OK);
  EXPECT_EQ(photon_engine_options_set_prefix_cache(o, prefix_cache), PHOTON_OK);
  EXPECT_EQ(photon_engine_options_set_max_running(o, max_running), PHOTON_OK);
  EXPECT_EQ(photon_engine_options_set_max_waiting(o, max_waiting), PHOTON_OK);
  EXPECT_EQ(photon_engine_options_set_memory_budget(o, budget), PHOTON_OK);
  EXPECT_EQ(photon_engine_options_set_step_tokens(o, step_tokens), PHOTON_OK);
  photon_engine* e = nullptr;
  EXPECT_EQ(photon_engine_create(model, o, &e), PHOTON_OK) << photon_last_error();
  photon_engine_options_free(o);
  return e;
}

// Steps until nothing is left, at most `limit` steps.
int run_to_end(photon_engine* e, int limit = 100000) {
  int steps = 0;
  int32_t left = 1;
  while (left > 0 && steps < limit) {
    EXPECT_EQ(photon_engine_step(e, &left), PHOTON_OK) << photon_last_error();
    ++steps;
  }
  EXPECT_EQ(left, 0) << "the engine did not finish within " << limit << " steps";
  return steps;
}

double engine_stat(const photon_engine* e, photon_engine_stat s) {
  double v = -1;
  EXPECT_EQ(photon_engine_get_stat(e, s, &v), PHOTON_OK) << photon_last_error();
  return v;
}

double request_stat(const photon_request* r, photon_request_stat s) {
  double v = -1;
  EXPECT_EQ(photon_request_get_stat(r, s, &v), PHOTON_OK) << photon_last_error();
  return v;
}

uint64_t memory_in_use(const photon_model* model) {
  uint64_t in_use = 0;
  EXPECT_EQ(photon_model_memory(model, &in_use, nullptr, 0), PHOTON_OK);
  return in_use;
}

class EngineRequests : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else the number of PHOTON levels.
  void SetUp() override {
    levels_ = GetParam();
    photon::ModelConfig config =
        levels_ == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels_);
    config.max_seq_len = 2400;
    path_ = photon::testing::scratch_model_path("test_engine_requests_" + std::to_string(levels_));
    photon::testing::write_test_model(config, path_, 41 + levels_);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }

  // Request i of a mixed set: modes, kv types, greedy and seeded sampling, prompt lengths and
  // budgets differ from one to the next.
  Ask ask(int i) const {
    Ask a;
    a.prompt = prompt(static_cast<size_t>(1 + (i * 29) % 97), i);
    a.max_tokens = 5 + (i * 7) % 23;
    if (levels_ >= 2) a.mode = i % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN;
    a.kv_type = i % 3 == 1 ? PHOTON_DTYPE_BF16 : PHOTON_DTYPE_F32;
    if (i % 4 >= 2) {
      a.temperature = 0.9f;
      a.seed = 1000 + static_cast<uint64_t>(i);
    }
    if (i % 3 == 0) a.top_logprobs = 1 + i % 5;
    return a;
  }

  photon_model* model_ = nullptr;
  std::string path_;
  int levels_ = 0;
};

TEST_P(EngineRequests, RequestsJoiningAndLeavingMidFlightEqualEachAlone) {
  constexpr int kRequests = 14;
  photon_engine* engine = make_engine(model_);
  std::vector<Generated> got(kRequests);
  std::vector<photon_request*> requests;
  // Two requests at first, then one more every third step: each joins a batch in flight, and the
  // short ones leave while the long ones go on.
  int step = 0;
  int32_t left = 0;
  while (requests.size() < kRequests || left > 0) {
    if (requests.size() < 2 || (step % 3 == 0 && requests.size() < kRequests)) {
      const int i = static_cast<int>(requests.size());
      requests.push_back(submit(engine, ask(i), &got[static_cast<size_t>(i)]));
    }
    ASSERT_EQ(photon_engine_step(engine, &left), PHOTON_OK) << photon_last_error();
    ASSERT_LT(++step, 10000);
  }
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    photon_stop_reason reason = PHOTON_STOP_NONE;
    const Generated expected = alone(model_, ask(i), &reason);
    EXPECT_EQ(got[static_cast<size_t>(i)].tokens, expected.tokens);
    EXPECT_EQ(got[static_cast<size_t>(i)].logprobs, expected.logprobs);
    EXPECT_EQ(got[static_cast<size_t>(i)].top, expected.top);
    EXPECT_EQ(photon_request_get_state(requests[static_cast<size_t>(i)]), PHOTON_REQUEST_FINISHED);
    EXPECT_EQ(photon_request_stop_reason(requests[static_cast<size_t>(i)]), reason);
    EXPECT_EQ(request_stat(requests[static_cast<size_t>(i)], PHOTON_REQUEST_GENERATED_TOKENS),
              static_cast<double>(expected.tokens.size()));
    EXPECT_EQ(request_stat(requests[static_cast<size_t>(i)], PHOTON_REQUEST_PROMPT_TOKENS),
              static_cast<double>(ask(i).prompt.size()));
  }
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_FINISHED), kRequests);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_RUNNING), 0);
  for (photon_request* r : requests) photon_request_free(r);
  photon_engine_free(engine);
}

TEST_P(EngineRequests, ALongPromptReadInChunksBesideRunningStreamsEqualsItAlone) {
  // 16 streams decode while a 2,000-token prompt is consumed 64 tokens a step.
  photon_engine* engine = make_engine(model_, 64, 1024, 0, 64);
  constexpr int kStreams = 16;
  std::vector<Generated> got(kStreams + 1);
  std::vector<photon_request*> requests;
  for (int i = 0; i < kStreams; ++i) {
    Ask a = ask(i);
    a.max_tokens = 40;
    requests.push_back(submit(engine, a, &got[static_cast<size_t>(i)]));
  }
  for (int i = 0; i < 3; ++i) ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
  Ask long_ask = ask(kStreams);
  long_ask.prompt = prompt(2000, 77);
  long_ask.max_tokens = 12;
  requests.push_back(submit(engine, long_ask, &got[kStreams]));
  const int steps = run_to_end(engine);
  EXPECT_GE(steps, 2000 / 64) << "the long prompt was not read in chunks";
  for (int i = 0; i <= kStreams; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    Ask a = i < kStreams ? ask(i) : long_ask;
    if (i < kStreams) a.max_tokens = 40;
    const Generated expected = alone(model_, a);
    EXPECT_EQ(got[static_cast<size_t>(i)].tokens, expected.tokens);
    EXPECT_EQ(got[static_cast<size_t>(i)].logprobs, expected.logprobs);
  }
  for (photon_request* r : requests) photon_request_free(r);
  photon_engine_free(engine);
}

// RecGen encodes a prompt whole at every prefill, so a RecGen prompt is read in one step, begun
// while the step has budget left, and a HierGen prompt step_tokens at a time.
TEST_P(EngineRequests, RecGenPromptsAreReadInOneStepOthersInChunks) {
  if (levels_ < 2) GTEST_SKIP() << "RecGen needs two levels or more";
  photon_engine* engine = make_engine(model_, 64, 1024, 0, 32);
  std::vector<Ask> asks(3);
  for (size_t i = 0; i < asks.size(); ++i) {
    asks[i].prompt = prompt(100 - 5 * i, static_cast<int>(i) + 20);
    asks[i].max_tokens = 6;
    asks[i].mode = i < 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN;
  }
  std::vector<Generated> got(asks.size());
  std::vector<photon_request*> requests;
  for (size_t i = 0; i < asks.size(); ++i) requests.push_back(submit(engine, asks[i], &got[i]));
  // Prompt tokens each request has read after each step: the first RecGen prompt whole in step
  // 1 (and its first token), the second in step 2 (step 1's budget is spent), then the HierGen
  // prompt 32 tokens a step.
  const std::vector<std::vector<double>> read = {
      {100, 0, 0}, {100, 95, 0}, {100, 95, 32}, {100, 95, 64}, {100, 95, 90}};
  for (size_t step = 0; step < read.size(); ++step) {
    ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK) << photon_last_error();
    for (size_t i = 0; i < asks.size(); ++i)
      EXPECT_EQ(request_stat(requests[i], PHOTON_REQUEST_PROMPT_TOKENS), read[step][i])
          << "request " << i << " after step " << step + 1;
  }
  EXPECT_GE(request_stat(requests[0], PHOTON_REQUEST_GENERATED_TOKENS), 1.0);
  run_to_end(engine);
  for (size_t i = 0; i < asks.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Generated expected = alone(model_, asks[i]);
    EXPECT_EQ(got[i].tokens, expected.tokens);
    EXPECT_EQ(got[i].logprobs, expected.logprobs);
    photon_request_free(requests[i]);
  }
  photon_engine_free(engine);
}

TEST_P(EngineRequests, PulledTokensEqualTheCallbacks) {
  photon_engine* engine = make_engine(model_);
  ASSERT_EQ(photon_engine_start(engine), PHOTON_OK) << photon_last_error();
  const Ask a = ask(3);
  photon_request* r = submit(engine, a, nullptr);
  Generated pulled;
  char piece[256];
  for (;;) {
    int32_t token = 0;
    size_t len = 0;
    float logprob = 0;
    ASSERT_EQ(photon_request_next_token(r, 10000, &token, piece, sizeof piece, &len, &logprob),
              PHOTON_OK)
        << photon_last_error();
    if (token < 0) break;
    pulled.tokens.push_back(token);
    pulled.logprobs.push_back(logprob);
    pulled.top.push_back(photon::testing::last_top());
  }
  const Generated expected = alone(model_, a);
  EXPECT_EQ(pulled.tokens, expected.tokens);
  EXPECT_EQ(pulled.logprobs, expected.logprobs);
  EXPECT_EQ(pulled.top, expected.top);
  ASSERT_FALSE(expected.top.empty());
  EXPECT_EQ(expected.top[0].size(), static_cast<size_t>(a.top_logprobs));
  EXPECT_EQ(photon_request_wait(r, 0), PHOTON_OK);
  ASSERT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_OK);
  photon_request_free(r);
  photon_engine_free(engine);
}

TEST_P(EngineRequests, AFinishedRequestsStateContinuesLikeOneLongSession) {
  photon_engine* engine = make_engine(model_);
  Ask first = ask(5);
  first.max_tokens = 9;
  Generated got1, got2;
  photon_request* r1 = submit(engine, first, &got1);
  run_to_end(engine);
  size_t size = 0;
  ASSERT_EQ(photon_request_save(r1, nullptr, 0, &size), PHOTON_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> state(size);
  ASSERT_EQ(photon_request_save(r1, state.data(), state.size(), &size), PHOTON_OK)
      << photon_last_error();

  // The second turn: the state, a few more prompt tokens, more tokens generated.
  const std::vector<int32_t> more = {5, 17, 29};
  photon_request_options* o = nullptr;
  ASSERT_EQ(photon_request_options_create(&o), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_state(o, state.data(), state.size()), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_prompt(o, more.data(), more.size()), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_max_tokens(o, 11), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_callback(o, collect, &got2), PHOTON_OK);
  photon_request* r2 = nullptr;
  ASSERT_EQ(photon_engine_submit(engine, o, &r2), PHOTON_OK) << photon_last_error();
  photon_request_options_free(o);
  run_to_end(engine);
  EXPECT_EQ(request_stat(r2, PHOTON_REQUEST_REUSED_TOKENS),
            static_cast<double>(first.prompt.size() + got1.tokens.size()));

  // The same as one session: prompt, 9 tokens, the three tokens, 11 tokens.
  photon_session_options* so = session_options(first);
  photon_session* s = nullptr;
  ASSERT_EQ(photon_session_create(model_, so, &s), PHOTON_OK);
  photon_session_options_free(so);
  ASSERT_EQ(photon_session_prefill(s, first.prompt.data(), first.prompt.size()), PHOTON_OK);
  Generated one1, one2;
  ASSERT_EQ(photon_session_generate(s, 9, collect, &one1, nullptr), PHOTON_OK);
  ASSERT_EQ(photon_session_prefill(s, more.data(), more.size()), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(s, 11, collect, &one2, nullptr), PHOTON_OK);
  EXPECT_EQ(got1.tokens, one1.tokens);
  EXPECT_EQ(got2.tokens, one2.tokens);
  EXPECT_EQ(got2.logprobs, one2.logprobs);

  // The session itself, taken from the request, continues as well.
  photon_session* taken = nullptr;
  ASSERT_EQ(photon_request_take_session(r2, &taken), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(photon_session_position(taken), photon_session_position(s));
  EXPECT_EQ(photon_request_take_session(r2, &taken), PHOTON_ERR_INVALID_ARGUMENT);
  Generated a, b;
  ASSERT_EQ(photon_session_generate(taken, 6, collect, &a, nullptr), PHOTON_OK);
  ASSERT_EQ(photon_session_generate(s, 6, collect, &b, nullptr), PHOTON_OK);
  EXPECT_EQ(a.tokens, b.tokens);
  photon_session_free(taken);
  photon_session_free(s);
  photon_request_free(r1);
  photon_request_free(r2);
  photon_engine_free(engine);
}

// The prefix cache: a request whose prompt begins with one read before (in RecGen, is one read
// before) starts from its save, and gives what reading its whole prompt gives, whatever its
// sampler.
TEST_P(EngineRequests, PromptsReadBeforeAreRestoredFromThePrefixCache) {
  std::vector<photon_mode> modes{PHOTON_MODE_AUTO};
  if (levels_ >= 2) modes = {PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN};
  for (const photon_mode mode : modes) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    photon_engine* engine = make_engine(model_, 64, 1024, 0, 512, 64ull << 20);
    Ask first;
    first.prompt = prompt(60, 3);
    first.max_tokens = 6;
    first.mode = mode;
    Generated got;
    photon_request* r = submit(engine, first, &got);
    run_to_end(engine);
    EXPECT_EQ(got.tokens, alone(model_, first).tokens);
    EXPECT_EQ(request_stat(r, PHOTON_REQUEST_REUSED_TOKENS), 0);
    EXPECT_GT(engine_stat(engine, PHOTON_ENGINE_PREFIX_BYTES), 0);
    photon_request_free(r);

    // Longer prompts that begin with it, sampled otherwise, together; the same prompt again; one
    // in another kv type; one that leaves it midway.
    std::vector<Ask> asks(5, first);
    for (int i = 0; i < 2; ++i) {
      for (int t = 0; t < 20 + 5 * i; ++t) asks[i].prompt.push_back(7 + 13 * t + i);
      asks[i].temperature = 0.9f;
      asks[i].seed = 77 + static_cast<uint64_t>(i);
      asks[i].top_logprobs = 2;
      asks[i].max_tokens = 9;
    }
    asks[3].kv_type = PHOTON_DTYPE_BF16;
    asks[4].prompt.resize(30);
    asks[4].prompt.push_back(11);
    // RecGen encodes a longer prompt whole: only the same prompt comes from the cache.
    const double extended = mode == PHOTON_MODE_RECGEN ? 0 : 60;
    const std::vector<double> reused = {extended, extended, 60, 0, 0};
    std::vector<Generated> out(asks.size());
    std::vector<photon_request*> requests;
    for (size_t i = 0; i < asks.size(); ++i) requests.push_back(submit(engine, asks[i], &out[i]));
    run_to_end(engine);
    for (size_t i = 0; i < asks.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      const Generated expected = alone(model_, asks[i]);
      EXPECT_EQ(out[i].tokens, expected.tokens);
      EXPECT_EQ(out[i].logprobs, expected.logprobs);
      EXPECT_EQ(out[i].top, expected.top);
      EXPECT_EQ(request_stat(requests[i], PHOTON_REQUEST_REUSED_TOKENS), reused[i]);
      EXPECT_EQ(request_stat(requests[i], PHOTON_REQUEST_PROMPT_TOKENS),
                static_cast<double>(asks[i].prompt.size()) - reused[i]);
      photon_request_free(requests[i]);
    }
    EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_PREFIX_HITS), mode == PHOTON_MODE_RECGEN ? 1 : 3);

    // The longer prompt was saved too: its own repeat is restored whole and decodes at once.
    Generated again;
    Ask repeat = asks[1];
    repeat.seed = 5;
    r = submit(engine, repeat, &again);
    run_to_end(engine);
    EXPECT_EQ(request_stat(r, PHOTON_REQUEST_REUSED_TOKENS),
              static_cast<double>(repeat.prompt.size()));
    EXPECT_EQ(request_stat(r, PHOTON_REQUEST_PROMPT_TOKENS), 0);
    EXPECT_EQ(again.tokens, alone(model_, repeat).tokens);
    photon_request_free(r);
    photon_engine_free(engine);
  }
}

TEST_P(EngineRequests, ChoicesOfOnePromptSubmittedTogetherReadItOnce) {
  photon_engine* engine = make_engine(model_, 64, 1024, 0, 32, 64ull << 20);
  // Three samplings of one 100-token prompt (read 32 tokens a step), one request that extends it,
  // and one unrelated request behind them.
  std::vector<Ask> asks(5);
  for (size_t i = 0; i < asks.size(); ++i) {
    asks[i].prompt = prompt(100, 9);
    asks[i].max_tokens = 7;
    asks[i].temperature = i == 0 ? 0.0f : 0.9f;
    asks[i].seed = 300 + i;
    if (levels_ >= 2) asks[i].mode = PHOTON_MODE_RECGEN;
  }
  asks[3].prompt.push_back(42);
  asks[4].prompt = prompt(20, 10);
  // RecGen encodes the longer prompt whole (and does not wait for the shorter one's save).
  const bool recgen = levels_ >= 2;
  std::vector<Generated> out(asks.size());
  std::vector<photon_request*> requests;
  for (size_t i = 0; i < asks.size(); ++i) requests.push_back(submit(engine, asks[i], &out[i]));
  run_to_end(engine);
  const std::vector<double> reused = {0, 100, 100, recgen ? 0.0 : 100.0, 0};
  for (size_t i = 0; i < asks.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Generated expected = alone(model_, asks[i]);
    EXPECT_EQ(out[i].tokens, expected.tokens);
    EXPECT_EQ(out[i].logprobs, expected.logprobs);
    EXPECT_EQ(request_stat(requests[i], PHOTON_REQUEST_REUSED_TOKENS), reused[i]);
    photon_request_free(requests[i]);
  }
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_PROMPT_TOKENS), 100 + (recgen ? 101 : 1) + 20);
  photon_engine_free(engine);
}

TEST_P(EngineRequests, ThePrefixCacheKeepsTheMostRecentlyUsedWithinItsBytes) {
  const auto read = [&](photon_engine* engine, int seed) {
    Ask a;
    a.prompt = prompt(40, seed);
    a.max_tokens = 2;
    photon_request* r = submit(engine, a, nullptr);
    run_to_end(engine);
    const double reused = request_stat(r, PHOTON_REQUEST_REUSED_TOKENS);
    photon_request_free(r);
    return reused;
  };
  // The size of one save (prompts of one length save alike).
  photon_engine* probe = make_engine(model_, 64, 1024, 0, 512, 64ull << 20);
  read(probe, 1);
  const auto one = static_cast<uint64_t>(engine_stat(probe, PHOTON_ENGINE_PREFIX_BYTES));
  ASSERT_GT(one, 0u);
  photon_engine_free(probe);

  photon_engine* engine = make_engine(model_, 64, 1024, 0, 512, one * 5 / 2);
  EXPECT_EQ(read(engine, 1), 0);
  EXPECT_EQ(read(engine, 2), 0);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_PREFIX_BYTES), 2 * one);
  EXPECT_EQ(read(engine, 1), 40);  // prompt 1 is now the most recently used
  EXPECT_EQ(read(engine, 3), 0);   // and prompt 2 makes room for prompt 3
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_PREFIX_BYTES), 2 * one);
  EXPECT_EQ(read(engine, 1), 40);
  EXPECT_EQ(read(engine, 3), 40);
  EXPECT_EQ(read(engine, 2), 0);
  photon_engine_free(engine);

  // A cache smaller than one save keeps none.
  engine = make_engine(model_, 64, 1024, 0, 512, one - 1);
  EXPECT_EQ(read(engine, 1), 0);
  EXPECT_EQ(read(engine, 1), 0);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_PREFIX_BYTES), 0);
  photon_engine_free(engine);
}

TEST_P(EngineRequests, ALiveSessionIsTakenOverAndGivenBack) {
  photon_engine* engine = make_engine(model_);
  const Ask a = ask(2);
  photon_session_options* so = session_options(a);
  photon_session* s = nullptr;
  ASSERT_EQ(photon_session_create(model_, so, &s), PHOTON_OK);
  photon_session_options_free(so);
  ASSERT_EQ(photon_session_prefill(s, a.prompt.data(), a.prompt.size()), PHOTON_OK);
  photon_request_options* o = nullptr;
  ASSERT_EQ(photon_request_options_create(&o), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_session(o, s), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_max_tokens(o, a.max_tokens), PHOTON_OK);
  Generated got;
  ASSERT_EQ(photon_request_options_set_callback(o, collect, &got), PHOTON_OK);
  photon_request* r = nullptr;
  ASSERT_EQ(photon_engine_submit(engine, o, &r), PHOTON_OK) << photon_last_error();
  photon_request_options_free(o);
  run_to_end(engine);
  photon_session* back = nullptr;
  ASSERT_EQ(photon_request_take_session(r, &back), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(back, s) << "the same handle comes back";
  EXPECT_EQ(got.tokens, alone(model_, a).tokens);
  EXPECT_EQ(photon_session_position(back),
            static_cast<int32_t>(a.prompt.size() + got.tokens.size()));
  photon_request_free(r);
  photon_session_free(back);
  photon_engine_free(engine);
}

std::string ModelName(const ::testing::TestParamInfo<int>& param) {
  return param.param == 0 ? "vanilla" : "photon_L" + std::to_string(param.param);
}

// Sessions that outgrow their first caches, under a budget of half what they hold together at
// their largest: the newest are paused (saved) and resumed, each ends with the tokens it has
// alone, and the model's memory counter never shows more than the budget between steps.
TEST_P(EngineRequests, PausedAndResumedUnderATightBudgetEqualEachAlone) {
  constexpr int kRequests = 8;
  const auto long_ask = [&](int i) {
    Ask a = ask(i);
    a.max_tokens = 180 + 23 * i;  // past the first 64 positions of every growing cache
    return a;
  };
  // The peak of the same requests without a budget.
  photon_engine* free_engine = make_engine(model_);
  std::vector<photon_request*> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(submit(free_engine, long_ask(i), nullptr));
  run_to_end(free_engine);
  const double peak = engine_stat(free_engine, PHOTON_ENGINE_MEMORY_PEAK);
  EXPECT_EQ(engine_stat(free_engine, PHOTON_ENGINE_PAUSES), 0);
  for (photon_request* r : requests) photon_request_free(r);
  requests.clear();
  photon_engine_free(free_engine);

  const uint64_t budget = static_cast<uint64_t>(peak / 2);
  photon_engine* engine = make_engine(model_, 64, 1024, budget, 64);
  const uint64_t idle = memory_in_use(model_);
  std::vector<Generated> got(kRequests);
  for (int i = 0; i < kRequests; ++i)
    requests.push_back(submit(engine, long_ask(i), &got[static_cast<size_t>(i)]));
  // A finished request keeps its session until it is freed: each is freed as it finishes.
  std::vector<photon_stop_reason> reasons(kRequests, PHOTON_STOP_NONE);
  double pauses = 0;
  const auto free_finished = [&] {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!requests[i] || photon_request_get_state(requests[i]) != PHOTON_REQUEST_FINISHED)
        continue;
      reasons[i] = photon_request_stop_reason(requests[i]);
      pauses += request_stat(requests[i], PHOTON_REQUEST_PAUSES);
      photon_request_free(requests[i]);
      requests[i] = nullptr;
    }
  };
  int32_t left = kRequests;
  double most_paused = 0;
  for (int step = 0; left > 0; ++step) {
    ASSERT_LT(step, 20000);
    ASSERT_EQ(photon_engine_step(engine, &left), PHOTON_OK) << photon_last_error();
    free_finished();
    ASSERT_LE(memory_in_use(model_), idle + budget) << "after step " << step;
    ASSERT_LE(engine_stat(engine, PHOTON_ENGINE_MEMORY_IN_USE), static_cast<double>(budget));
    most_paused = std::max(most_paused, engine_stat(engine, PHOTON_ENGINE_PAUSED));
  }
  EXPECT_GT(engine_stat(engine, PHOTON_ENGINE_PAUSES), 0) << "the budget paused nothing";
  EXPECT_GT(most_paused, 0);
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    photon_stop_reason reason = PHOTON_STOP_NONE;
    const Generated expected = alone(model_, long_ask(i), &reason);
    EXPECT_EQ(got[static_cast<size_t>(i)].tokens, expected.tokens);
    EXPECT_EQ(got[static_cast<size_t>(i)].logprobs, expected.logprobs);
    EXPECT_EQ(reasons[static_cast<size_t>(i)], reason);
  }
  EXPECT_EQ(pauses, engine_stat(engine, PHOTON_ENGINE_PAUSES));
  photon_engine_free(engine);
  EXPECT_EQ(memory_in_use(model_), idle);
}

// Short prompts under a tight budget: requests admitted in a step are paused by it before their
// prompt is read, so their saved states hold no tokens yet (a RecGen state of an empty session
// once failed to restore), and resume to equal each alone.
TEST_P(EngineRequests, RequestsPausedBeforeTheirPromptIsReadEqualEachAlone) {
  constexpr int kRequests = 8;
  const auto short_ask = [&](int i) {
    Ask a = ask(i);
    a.prompt = prompt(static_cast<size_t>(5 + 3 * i), i);
    a.max_tokens = 200;
    return a;
  };
  photon_engine* free_engine = make_engine(model_);
  std::vector<photon_request*> requests;
  for (int i = 0; i < kRequests; ++i)
    requests.push_back(submit(free_engine, short_ask(i), nullptr));
  run_to_end(free_engine);
  const double peak = engine_stat(free_engine, PHOTON_ENGINE_MEMORY_PEAK);
  for (photon_request* r : requests) photon_request_free(r);
  requests.clear();
  photon_engine_free(free_engine);

  photon_engine* engine = make_engine(model_, 64, 1024, static_cast<uint64_t>(peak / 2), 64);
  std::vector<Generated> got(kRequests);
  for (int i = 0; i < kRequests; ++i)
    requests.push_back(submit(engine, short_ask(i), &got[static_cast<size_t>(i)]));
  run_to_end(engine);
  EXPECT_GT(engine_stat(engine, PHOTON_ENGINE_PAUSES), 0) << "the budget paused nothing";
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(photon_request_status(requests[static_cast<size_t>(i)]), PHOTON_OK)
        << photon_request_error(requests[static_cast<size_t>(i)]);
    const Generated expected = alone(model_, short_ask(i));
    EXPECT_EQ(got[static_cast<size_t>(i)].tokens, expected.tokens);
    EXPECT_EQ(got[static_cast<size_t>(i)].logprobs, expected.logprobs);
    photon_request_free(requests[static_cast<size_t>(i)]);
  }
  photon_engine_free(engine);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineRequests, ::testing::Values(0, 1, 2, 3), ModelName);

// ---- limits, cancellation, threads ------------------------------------------------------------

class EngineLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    photon::ModelConfig config = photon::testing::tiny_photon(2);
    config.max_seq_len = 2400;
    path_ = photon::testing::scratch_model_path("test_engine_limits");
    photon::testing::write_test_model(config, path_, 7);
    ASSERT_EQ(photon_model_load(path_.c_str(), nullptr, &model_), PHOTON_OK) << photon_last_error();
  }
  void TearDown() override {
    photon_model_free(model_);
    std::remove(path_.c_str());
  }
  Ask long_ask(int i) const {
    Ask a;
    a.prompt = prompt(20, i);
    a.max_tokens = -1;
    a.mode = i % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN;
    return a;
  }
  photon_model* model_ = nullptr;
  std::string path_;
};

TEST_F(EngineLimits, AFullQueueRefusesWithBusy) {
  photon_engine* engine = make_engine(model_, 1, 2);
  photon_request* a = submit(engine, long_ask(0), nullptr);
  photon_request* b = submit(engine, long_ask(1), nullptr);
  photon_request_options* o = nullptr;
  ASSERT_EQ(photon_request_options_create(&o), PHOTON_OK);
  const std::vector<int32_t> p = prompt(5, 3);
  ASSERT_EQ(photon_request_options_set_prompt(o, p.data(), p.size()), PHOTON_OK);
  photon_request* c = nullptr;
  EXPECT_EQ(photon_engine_submit(engine, o, &c), PHOTON_ERR_BUSY);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(photon_last_error()).find("2 requests wait already"), std::string::npos)
      << photon_last_error();
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_REFUSED), 1);
  // One step admits one (max_running 1): room in the queue again.
  ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_RUNNING), 1);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_WAITING), 1);
  ASSERT_EQ(photon_engine_submit(engine, o, &c), PHOTON_OK) << photon_last_error();
  photon_request_options_free(o);
  for (photon_request* r : {a, b, c}) photon_request_free(r);
  photon_engine_free(engine);
}

TEST_F(EngineLimits, CancelFromAnotherThreadEndsTheStreamAndReturnsItsMemory) {
  photon_engine* engine = make_engine(model_);
  const uint64_t before = memory_in_use(model_);
  photon_request* keep = submit(engine, long_ask(0), nullptr);
  photon_request* victim = submit(engine, long_ask(1), nullptr);
  // Both run: take a few steps by hand, then hand the engine to its worker.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
  ASSERT_EQ(photon_request_get_state(victim), PHOTON_REQUEST_RUNNING);
  ASSERT_EQ(photon_engine_start(engine), PHOTON_OK);
  std::thread canceller([&] { photon_request_cancel(victim); });
  canceller.join();
  ASSERT_EQ(photon_request_wait(victim, 10000), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(photon_request_stop_reason(victim), PHOTON_STOP_CANCELLED);
  photon_request_cancel(keep);
  ASSERT_EQ(photon_request_wait(keep, 10000), PHOTON_OK);
  ASSERT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_OK);
  // Cancelled requests free their sessions: the caches are gone, only the engine's scratch stays.
  photon_request_free(victim);
  photon_request_free(keep);
  photon_engine_free(engine);
  EXPECT_EQ(memory_in_use(model_), before);
}

TEST_F(EngineLimits, ACancelledRequestEndsAtTheNextStep) {
  photon_engine* engine = make_engine(model_);
  photon_request* r = submit(engine, long_ask(1), nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
  photon_request_cancel(r);
  int32_t left = -1;
  ASSERT_EQ(photon_engine_step(engine, &left), PHOTON_OK);
  EXPECT_EQ(left, 0);
  EXPECT_EQ(photon_request_get_state(r), PHOTON_REQUEST_FINISHED);
  EXPECT_EQ(photon_request_stop_reason(r), PHOTON_STOP_CANCELLED);
  size_t size = 0;
  EXPECT_EQ(photon_request_save(r, nullptr, 0, &size), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_CANCELLED), 1);
  photon_request_free(r);
  photon_engine_free(engine);
}

TEST_F(EngineLimits, AThousandSubmitCancelCyclesLeaveMemoryFlat) {
  photon_engine* engine = make_engine(model_);
  // Warm up: the engine's scratch grows to its steady size.
  for (int i = 0; i < 4; ++i) {
    photon_request* r = submit(engine, long_ask(i), nullptr);
    for (int s = 0; s < 3; ++s) ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
    photon_request_free(r);
    run_to_end(engine);
  }
  const uint64_t before = memory_in_use(model_);
  for (int i = 0; i < 1000; ++i) {
    photon_request* r = submit(engine, long_ask(i), nullptr);
    if (i % 2) {
      ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
    }
    photon_request_cancel(r);
    ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
    ASSERT_EQ(photon_request_get_state(r), PHOTON_REQUEST_FINISHED);
    photon_request_free(r);
  }
  EXPECT_EQ(memory_in_use(model_), before);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_CANCELLED), 1004);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_MEMORY_IN_USE), 0);
  photon_engine_free(engine);
}

TEST_F(EngineLimits, ACallbackThatStopsEndsOnlyItsOwnRequest) {
  photon_engine* engine = make_engine(model_);
  struct Stopper {
    int seen = 0;
  } stopper;
  photon_request_options* o = nullptr;
  ASSERT_EQ(photon_request_options_create(&o), PHOTON_OK);
  const Ask a = long_ask(0);
  ASSERT_EQ(photon_request_options_set_prompt(o, a.prompt.data(), a.prompt.size()), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_callback(
                o,
                [](void* user, int32_t, const char*, size_t, float) {
                  return ++static_cast<Stopper*>(user)->seen == 3 ? 1 : 0;
                },
                &stopper),
            PHOTON_OK);
  photon_request* stops = nullptr;
  ASSERT_EQ(photon_engine_submit(engine, o, &stops), PHOTON_OK);
  photon_request_options_free(o);
  Ask b = long_ask(1);
  b.max_tokens = 20;
  Generated got;
  photon_request* other = submit(engine, b, &got);
  run_to_end(engine);
  EXPECT_EQ(stopper.seen, 3);
  EXPECT_EQ(photon_request_stop_reason(stops), PHOTON_STOP_CALLBACK);
  EXPECT_EQ(photon_request_stop_reason(other), PHOTON_STOP_LENGTH);
  EXPECT_EQ(got.tokens, alone(model_, b).tokens);
  photon_request_free(stops);
  photon_request_free(other);
  photon_engine_free(engine);
}

// The finish callback comes once per request, after its last token, however the request ends: its
// length reached, failed, cancelled while waiting, or cancelled by photon_engine_free (on the
// freeing thread); never after photon_request_free. It may free its own request (run under ASan).
TEST_F(EngineLimits, FinishCallbacksComeOnceAfterTheLastToken) {
  struct Seen {
    photon_request* request = nullptr;
    int tokens = 0, finishes = 0, tokens_at_finish = -1;
    bool frees_itself = false;
    photon_stop_reason reason = PHOTON_STOP_NONE;
    photon_status status = PHOTON_OK;
    photon_request_state state = PHOTON_REQUEST_WAITING;
  };
  photon_engine* engine = make_engine(model_);
  auto submit_seen = [&](const Ask& a, Seen* seen, bool damaged_state) {
    photon_request_options* o = nullptr;
    EXPECT_EQ(photon_request_options_create(&o), PHOTON_OK);
    EXPECT_EQ(photon_request_options_set_prompt(o, a.prompt.data(), a.prompt.size()), PHOTON_OK);
    EXPECT_EQ(photon_request_options_set_max_tokens(o, a.max_tokens), PHOTON_OK);
    const uint8_t junk[16] = {1, 2, 3};
    if (damaged_state) {
      EXPECT_EQ(photon_request_options_set_state(o, junk, sizeof junk), PHOTON_OK);
    }
    EXPECT_EQ(photon_request_options_set_callback(
                  o,
                  [](void* user, int32_t, const char*, size_t, float) {
                    ++static_cast<Seen*>(user)->tokens;
                    return 0;
                  },
                  seen),
              PHOTON_OK);
    EXPECT_EQ(photon_request_options_set_finish_callback(
                  o,
                  [](void* user, photon_stop_reason reason, photon_status status) {
                    auto* s = static_cast<Seen*>(user);
                    ++s->finishes;
                    s->tokens_at_finish = s->tokens;
                    s->reason = reason;
                    s->status = status;
                    s->state = photon_request_get_state(s->request);
                    if (s->frees_itself) photon_request_free(s->request);
                  },
                  seen),
              PHOTON_OK);
    EXPECT_EQ(photon_engine_submit(engine, o, &seen->request), PHOTON_OK) << photon_last_error();
    photon_request_options_free(o);
  };
  Seen done, failed, cancelled, freed, left_running, done_frees, left_frees;
  done_frees.frees_itself = left_frees.frees_itself = true;
  Ask a = long_ask(0);
  a.max_tokens = 6;
  submit_seen(a, &done, false);
  submit_seen(a, &done_frees, false);
  submit_seen(long_ask(1), &failed, true);
  submit_seen(long_ask(2), &cancelled, false);
  submit_seen(long_ask(3), &freed, false);
  submit_seen(long_ask(4), &left_running, false);
  submit_seen(long_ask(5), &left_frees, false);
  photon_request_cancel(cancelled.request);
  photon_request_free(freed.request);
  for (int step = 0; step < 12; ++step)  // `left_running` has no limit: it runs on
    ASSERT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK) << photon_last_error();
  EXPECT_EQ(done.finishes, 1);
  EXPECT_EQ(done.reason, PHOTON_STOP_LENGTH);
  EXPECT_EQ(done.tokens_at_finish, 6);
  EXPECT_EQ(done.state, PHOTON_REQUEST_FINISHED);
  EXPECT_EQ(failed.finishes, 1);
  EXPECT_EQ(failed.reason, PHOTON_STOP_ERROR);
  EXPECT_EQ(failed.status, photon_request_status(failed.request));
  EXPECT_NE(failed.status, PHOTON_OK);
  EXPECT_EQ(cancelled.finishes, 1);
  EXPECT_EQ(cancelled.reason, PHOTON_STOP_CANCELLED);
  EXPECT_EQ(done_frees.finishes, 1);
  EXPECT_EQ(done_frees.tokens_at_finish, 6);
  EXPECT_EQ(freed.finishes, 0);
  EXPECT_EQ(left_running.finishes, 0);
  EXPECT_GT(left_running.tokens, 0);
  photon_engine_free(engine);
  EXPECT_EQ(left_frees.finishes, 1);
  EXPECT_EQ(left_frees.reason, PHOTON_STOP_CANCELLED);
  EXPECT_EQ(left_running.finishes, 1);
  EXPECT_EQ(left_running.reason, PHOTON_STOP_CANCELLED);
  EXPECT_EQ(left_running.tokens_at_finish, left_running.tokens);
  EXPECT_EQ(done.finishes + failed.finishes + cancelled.finishes, 3);
  for (Seen* s : {&done, &failed, &cancelled, &left_running}) photon_request_free(s->request);
}

TEST_F(EngineLimits, BadRequestsFailWithTheirMessage) {
  photon_engine* engine = make_engine(model_);
  photon_request_options* o = nullptr;
  ASSERT_EQ(photon_request_options_create(&o), PHOTON_OK);
  photon_request* r = nullptr;
  EXPECT_EQ(photon_engine_submit(engine, o, &r), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(photon_last_error()),
            "photon_engine_submit: the request has no prompt, state or session");
  const std::vector<int32_t> bad = {1, 5, 512};
  ASSERT_EQ(photon_request_options_set_prompt(o, bad.data(), bad.size()), PHOTON_OK);
  EXPECT_EQ(photon_engine_submit(engine, o, &r), PHOTON_ERR_BAD_TOKEN);
  EXPECT_EQ(std::string(photon_last_error()),
            "photon_engine_submit: prompt token 512 at position 2 is outside the vocabulary "
            "[0, 512)");
  // A damaged state fails the request, not the engine.
  const std::vector<int32_t> good = {1, 5, 6};
  const uint8_t junk[16] = {1, 2, 3};
  ASSERT_EQ(photon_request_options_set_prompt(o, good.data(), good.size()), PHOTON_OK);
  ASSERT_EQ(photon_request_options_set_state(o, junk, sizeof junk), PHOTON_OK);
  ASSERT_EQ(photon_engine_submit(engine, o, &r), PHOTON_OK) << photon_last_error();
  photon_request_options_free(o);
  Ask fine = long_ask(0);
  fine.max_tokens = 4;
  Generated got;
  photon_request* ok = submit(engine, fine, &got);
  run_to_end(engine);
  EXPECT_EQ(photon_request_stop_reason(r), PHOTON_STOP_ERROR);
  EXPECT_NE(photon_request_status(r), PHOTON_OK);
  EXPECT_NE(std::string(photon_request_error(r)), "");
  EXPECT_EQ(photon_request_stop_reason(ok), PHOTON_STOP_LENGTH);
  EXPECT_EQ(got.tokens.size(), 4u);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_FAILED), 1);
  // Steps need the engine to themselves.
  ASSERT_EQ(photon_engine_start(engine), PHOTON_OK);
  EXPECT_EQ(photon_engine_step(engine, nullptr), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_engine_start(engine), PHOTON_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_CANCEL), PHOTON_OK);
  EXPECT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_CANCEL), PHOTON_ERR_INVALID_ARGUMENT);
  photon_request_free(r);
  photon_request_free(ok);
  photon_engine_free(engine);
}

TEST_F(EngineLimits, ThreadsSubmitPullAndCancelWhileTheWorkerRuns) {
  photon_engine* engine = make_engine(model_, 8, 64);
  ASSERT_EQ(photon_engine_start(engine), PHOTON_OK);
  std::atomic<int> finished{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        Ask a = long_ask(t * 100 + i);
        a.max_tokens = 3 + i % 5;
        photon_request_options* o = nullptr;
        photon_request_options_create(&o);
        photon_request_options_set_prompt(o, a.prompt.data(), a.prompt.size());
        photon_request_options_set_max_tokens(o, a.max_tokens);
        photon_request* r = nullptr;
        const photon_status st = photon_engine_submit(engine, o, &r);
        photon_request_options_free(o);
        if (st == PHOTON_ERR_BUSY) {
          ++refused;
          continue;
        }
        if (i % 3 == 0) photon_request_cancel(r);
        int32_t token = 0;
        size_t len = 0;
        char piece[64];
        while (photon_request_next_token(r, 10000, &token, piece, sizeof piece, &len, nullptr) ==
                   PHOTON_OK &&
               token >= 0) {
        }
        if (photon_request_get_state(r) == PHOTON_REQUEST_FINISHED) ++finished;
        if (i % 4 == 1) photon_request_cancel(r);  // after the end: changes nothing
        photon_request_free(r);
      }
    });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_OK);
  EXPECT_EQ(finished + refused, 48);
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_FINISHED), finished.load());
  photon_engine_free(engine);
}

}  // namespace

namespace {

// Threads that submit requests with callbacks, cancel and free them mid-stream from other threads,
// and read statistics, all while the worker steps: every request ends, no callback runs after its
// request was freed, and the tokens of the requests left alone equal each run alone.
TEST(EngineThreads, SubmittersCancellersFreersAndReadersRaceTheWorker) {
  photon::ModelConfig config = photon::testing::tiny_photon(2);
  const std::string path = photon::testing::scratch_model_path("test_engine_threads");
  photon::testing::write_test_model(config, path, 9);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  photon_engine* engine = make_engine(model, 6, 256);
  ASSERT_EQ(photon_engine_start(engine), PHOTON_OK);

  // A callback's record: what it received, and whether its request was freed already.
  struct Record {
    Generated got;
    std::atomic<bool> freed{false};
    std::atomic<int> after_free{0};
    std::atomic<int> finishes{0};
  };
  const auto on_token = [](void* user, int32_t token, const char*, size_t, float logprob) {
    auto* rec = static_cast<Record*>(user);
    if (rec->freed.load()) ++rec->after_free;
    rec->got.tokens.push_back(token);
    rec->got.logprobs.push_back(logprob);
    return 0;
  };
  const auto on_finish = [](void* user, photon_stop_reason, photon_status) {
    auto* rec = static_cast<Record*>(user);
    if (rec->freed.load()) ++rec->after_free;
    ++rec->finishes;
  };
  constexpr int kThreads = 4, kPerThread = 10;
  std::vector<std::unique_ptr<Record>> records(kThreads * kPerThread);
  for (auto& r : records) r = std::make_unique<Record>();
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (int s = 0; s <= PHOTON_ENGINE_TOKENS_PER_SECOND; ++s)
        engine_stat(engine, static_cast<photon_engine_stat>(s));
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int k = t * kPerThread + i;
        Ask a;
        a.prompt = prompt(10 + k % 7, k);
        a.max_tokens = 12;
        a.mode = k % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN;
        photon_request_options* o = nullptr;
        photon_request_options_create(&o);
        photon_session_options* so = session_options(a);
        photon_request_options_set_session_options(o, so);
        photon_session_options_free(so);
        photon_request_options_set_prompt(o, a.prompt.data(), a.prompt.size());
        photon_request_options_set_max_tokens(o, a.max_tokens);
        photon_request_options_set_callback(o, on_token, records[static_cast<size_t>(k)].get());
        photon_request_options_set_finish_callback(o, on_finish,
                                                   records[static_cast<size_t>(k)].get());
        photon_request* r = nullptr;
        ASSERT_EQ(photon_engine_submit(engine, o, &r), PHOTON_OK) << photon_last_error();
        photon_request_options_free(o);
        switch (k % 3) {
          case 0: photon_request_wait(r, -1); break;  // left alone
          case 1: {                                   // cancelled from another thread
            std::thread([r] { photon_request_cancel(r); }).join();
            photon_request_wait(r, -1);
            break;
          }
          case 2:  // freed while it may be streaming
            std::this_thread::sleep_for(std::chrono::microseconds(200 * (k % 5)));
            break;
        }
        photon_request_free(r);
        records[static_cast<size_t>(k)]->freed.store(true);
      }
    });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_OK);
  done.store(true);
  reader.join();
  EXPECT_EQ(engine_stat(engine, PHOTON_ENGINE_FINISHED), kThreads * kPerThread);
  for (int k = 0; k < kThreads * kPerThread; ++k) {
    EXPECT_EQ(records[static_cast<size_t>(k)]->after_free.load(), 0) << "request " << k;
    // Waited for, a request has been told its end; freed while it may run, at most once.
    const int finishes = records[static_cast<size_t>(k)]->finishes.load();
    if (k % 3 != 2) {
      EXPECT_EQ(finishes, 1) << "request " << k;
    } else {
      EXPECT_LE(finishes, 1) << "request " << k;
    }
    if (k % 3 != 0) continue;
    Ask a;
    a.prompt = prompt(10 + k % 7, k);
    a.max_tokens = 12;
    a.mode = k % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN;
    EXPECT_EQ(records[static_cast<size_t>(k)]->got.tokens, alone(model, a).tokens)
        << "request " << k;
  }
  photon_engine_free(engine);
  photon_model_free(model);
  std::remove(path.c_str());
}

}  // namespace
