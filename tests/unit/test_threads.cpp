// The thread option of photon_load_options_set_threads: argument checks; the same tokens,
// log-probabilities, scores and saved states for every thread count; a 1-thread model computes on
// the calling thread only (process CPU time at most its wall time); sessions of one model driven
// from several application threads give the tokens of a sequential run, with all the process's CPU
// time on those threads (no hidden helpers, so N threads can use N cores).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "photon.h"
#include "test_models.h"

namespace {

double seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

photon_model* load(const std::string& path, int32_t threads) {
  photon_load_options* options = nullptr;
  EXPECT_EQ(photon_load_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_threads(options, threads), PHOTON_OK) << photon_last_error();
  photon_model* model = nullptr;
  EXPECT_EQ(photon_model_load(path.c_str(), options, &model), PHOTON_OK) << photon_last_error();
  photon_load_options_free(options);
  return model;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<float> scores;
  std::vector<std::vector<uint8_t>> states;
};

struct Collected {
  std::vector<int32_t>* tokens;
  std::vector<float>* logprobs;
};

int collect_batch(void* user, size_t, int32_t token, const char*, size_t, float logprob) {
  auto* c = static_cast<Collected*>(user);
  c->tokens->push_back(token);
  c->logprobs->push_back(logprob);
  return 0;
}

std::vector<int32_t> prompt(int session, int length) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < length; ++i) p.push_back(3 + (i * 31 + session * 97) % 500);
  return p;
}

// `count` sessions (prompts of 40 + 8 i tokens) advanced together by `generate` tokens.
Result run_sessions(photon_model* model, int first, int count, int generate) {
  Result r;
  std::vector<photon_session*> sessions;
  photon_session_options* o = nullptr;
  photon_session_options_create(&o);
  photon_session_options_set_ignore_eos(o, 1);
  photon_session_options_set_temperature(o, 0.9f);
  for (int i = first; i < first + count; ++i) {
    photon_session_options_set_seed(o, 100 + i);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
    const std::vector<int32_t> p = prompt(i, 40 + 8 * i);
    EXPECT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK) << photon_last_error();
    sessions.push_back(s);
  }
  photon_session_options_free(o);
  Collected c{&r.tokens, &r.logprobs};
  EXPECT_EQ(photon_session_generate_batch(sessions.data(), sessions.size(), generate, collect_batch,
                                          &c, nullptr),
            PHOTON_OK)
      << photon_last_error();
  for (photon_session* s : sessions) {
    size_t size = 0;
    photon_session_save(s, nullptr, 0, &size);
    std::vector<uint8_t> state(size);
    EXPECT_EQ(photon_session_save(s, state.data(), state.size(), &size), PHOTON_OK);
    r.states.push_back(std::move(state));
    photon_session_free(s);
  }
  return r;
}

class Threads : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // vanilla, D 256, 4 layers: large enough that its GEMMs and attention split over threads.
    photon::ModelConfig c = photon::testing::tiny_vanilla();
    c.dim = 256;
    c.vocab_size = 4096;
    c.max_seq_len = 1024;
    c.stack = photon::testing::tiny_stack(4, 8, 4, 32, 768);
    path_ = photon::testing::scratch_model_path("test_threads_vanilla");
    photon::testing::write_test_model(c, path_, 21);
  }
  static void TearDownTestSuite() { std::remove(path_.c_str()); }
  static std::string path_;
};
std::string Threads::path_;

TEST_F(Threads, OptionChecksItsArguments) {
  EXPECT_EQ(photon_load_options_set_threads(nullptr, 1), PHOTON_ERR_INVALID_ARGUMENT);
  photon_load_options* options = nullptr;
  ASSERT_EQ(photon_load_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_threads(options, -1), PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(photon_last_error()).find("-1"), std::string::npos) << photon_last_error();
  EXPECT_EQ(photon_load_options_set_threads(options, 0), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_threads(options, 64), PHOTON_OK);
  photon_load_options_free(options);
}

TEST_F(Threads, EveryThreadCountGivesTheSameResults) {
  Result reference;
  for (int32_t threads : {1, 2, 3, 0}) {
    photon_model* model = load(path_, threads);
    ASSERT_NE(model, nullptr);
    // 40 sessions: decoding rows run the skinny kernels, and 40 rows of 4,096 logits are enough
    // to sample on several threads; the prompts' prefill and the scores of 300 tokens run GEMMs.
    Result r = run_sessions(model, 0, 40, 12);
    const std::vector<int32_t> sequence = prompt(9, 300);
    r.scores.resize(sequence.size());
    EXPECT_EQ(photon_model_score(model, sequence.data(), sequence.size(), r.scores.data()),
              PHOTON_OK);
    r.scores.erase(r.scores.begin());  // NaN: the first token is not predicted
    photon_model_free(model);
    if (threads == 1) {
      reference = r;
      continue;
    }
    EXPECT_EQ(r.tokens, reference.tokens) << threads << " threads";
    EXPECT_EQ(r.logprobs, reference.logprobs) << threads << " threads";
    EXPECT_EQ(r.scores, reference.scores) << threads << " threads";
    EXPECT_TRUE(r.states == reference.states) << threads << " threads: saved states differ";
  }
}

TEST_F(Threads, OneThreadComputesOnTheCallingThreadOnly) {
  photon_model* model = load(path_, 1);
  ASSERT_NE(model, nullptr);
  run_sessions(model, 0, 2, 4);  // first calls: lazily sized buffers, library start-up
  // Libraries' own idle threads may spin briefly after start-up (OpenMP's, for one).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  for (int round = 0; round < 3; ++round) run_sessions(model, 0, 8, 24);
  const double cpu = process_cpu_seconds() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  // Whatever the machine's load, one thread cannot use more CPU time than wall time (10% and the
  // clocks' granularity for measurement).
  EXPECT_LE(cpu, wall * 1.1 + 0.02) << "cpu " << cpu << " s, wall " << wall << " s";
  photon_model_free(model);
}

TEST_F(Threads, SessionsOnSeveralThreadsOfOneModel) {
  photon_model* model = load(path_, 1);
  ASSERT_NE(model, nullptr);
  constexpr int kThreads = 3;
  std::vector<Result> sequential;
  for (int t = 0; t < kThreads; ++t) sequential.push_back(run_sessions(model, 2 * t, 2, 16));

  std::vector<Result> concurrent(kThreads);
  std::vector<double> thread_cpu(kThreads);
  const double cpu0 = process_cpu_seconds();
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      const double start = thread_cpu_seconds();
      concurrent[t] = run_sessions(model, 2 * t, 2, 16);
      thread_cpu[t] = thread_cpu_seconds() - start;
    });
  }
  for (std::thread& w : workers) w.join();
  const double process = process_cpu_seconds() - cpu0;
  double on_callers = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(concurrent[t].tokens, sequential[t].tokens) << "thread " << t;
    EXPECT_EQ(concurrent[t].logprobs, sequential[t].logprobs) << "thread " << t;
    EXPECT_TRUE(concurrent[t].states == sequential[t].states) << "thread " << t;
    on_callers += thread_cpu[t];
  }
  // The computation ran on the application's threads, none on helpers of the library.
  EXPECT_GE(on_callers, 0.9 * process - 0.02) << on_callers << " of " << process << " s";
  photon_model_free(model);
}

}  // namespace
