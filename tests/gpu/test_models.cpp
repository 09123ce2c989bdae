// Whole models on the GPU against the CPU engine, through the public API (the CUDA backend as the
// module libphoton-cuda.so, loaded as a user's program loads it), at both precisions, each against
// the CPU at the same precision: log-probabilities of random models of every architecture within
// 5e-2 with bf16 weights and 1e-3 with f32 weights kept in f32; the shipped trained model's greedy
// tokens (exact) and its perplexity and greedy tokens against the CPU's exact ones (bf16: within
// 1% and 90%); batched == alone; the serving engine's requests == sessions alone, also when a
// memory budget pauses them; sessions saved on one device and continued on the other; 1,000
// sessions created and freed with flat device memory; a context too large for the device is
// PHOTON_ERR_OUT_OF_MEMORY with the model still usable.
#include "test_models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "backend/cuda/runtime.h"
#include "photon.h"
#include "test_generated.h"
#include "trained_model_quality.h"

namespace {

using photon::ModelConfig;
using photon::testing::collect;
using photon::testing::Generated;

constexpr double kBf16Tolerance = 5e-2;
constexpr double kF32Tolerance = 1e-3;

struct ModelFree {
  void operator()(photon_model* m) const { photon_model_free(m); }
};
struct SessionFree {
  void operator()(photon_session* s) const { photon_session_free(s); }
};
using ModelPtr = std::unique_ptr<photon_model, ModelFree>;
using SessionPtr = std::unique_ptr<photon_session, SessionFree>;

bool have_device(std::string* reason) {
  return photon::cuda::device_count(reason) > 0;
}

#define REQUIRE_DEVICE()                                                     \
  do {                                                                       \
    std::string reason;                                                      \
    if (!have_device(&reason)) GTEST_SKIP() << "no CUDA device: " << reason; \
  } while (0)

// precision: null for the device's default (bf16 on a GPU, exact on the CPU).
ModelPtr load(const std::string& path, const char* device, const char* precision = nullptr) {
  photon_load_options* options = nullptr;
  EXPECT_EQ(photon_load_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_device(options, device), PHOTON_OK);
  if (precision) {
    EXPECT_EQ(photon_load_options_set_precision(options, precision), PHOTON_OK);
  }
  photon_model* model = nullptr;
  EXPECT_EQ(photon_model_load(path.c_str(), options, &model), PHOTON_OK) << photon_last_error();
  photon_load_options_free(options);
  return ModelPtr(model);
}

// A GPU model whose f32 weights stay f32 (the internal option behind the 1e-3 comparison).
ModelPtr load_exact(const std::string& path) {
  photon::DeviceChoice choice;
  choice.kind = photon::DeviceChoice::Kind::Cuda;
  choice.exact_f32 = true;
  choice.precision = photon::Precision::Exact;
  auto handle = std::make_unique<photon_model>();
  handle->model = photon::Model::load(path, {}, choice);
  handle->device = handle->model->backend().name();
  return ModelPtr(handle.release());
}

std::vector<float> score(const photon_model* model, const std::vector<int32_t>& tokens) {
  std::vector<float> logprobs(tokens.size(), NAN);
  EXPECT_EQ(photon_model_score(model, tokens.data(), tokens.size(), logprobs.data()), PHOTON_OK)
      << photon_last_error();
  return logprobs;
}

SessionPtr session(const photon_model* model, photon_mode mode, float temperature = 0.0f,
                   uint64_t seed = 0, int32_t context = 0,
                   photon_dtype kv_type = PHOTON_DTYPE_F32) {
  photon_session_options* o = nullptr;
  EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
  photon_session_options_set_mode(o, mode);
  photon_session_options_set_ignore_eos(o, 1);
  photon_session_options_set_temperature(o, temperature);
  photon_session_options_set_seed(o, seed);
  if (context > 0) photon_session_options_set_context_length(o, context);
  EXPECT_EQ(photon_session_options_set_kv_type(o, kv_type), PHOTON_OK);
  photon_session* s = nullptr;
  EXPECT_EQ(photon_session_create(model, o, &s), PHOTON_OK) << photon_last_error();
  photon_session_options_free(o);
  return SessionPtr(s);
}

Generated generate(photon_session* s, int32_t n) {
  Generated g;
  EXPECT_EQ(photon_session_generate(s, n, &collect, &g, nullptr), PHOTON_OK) << photon_last_error();
  return g;
}

Generated prefill_and_generate(const photon_model* model, photon_mode mode,
                               const std::vector<int32_t>& prompt, int32_t n) {
  SessionPtr s = session(model, mode);
  EXPECT_EQ(photon_session_prefill(s.get(), prompt.data(), prompt.size()), PHOTON_OK)
      << photon_last_error();
  return generate(s.get(), n);
}

// Positions where both runs had the same history (every token before agrees): there the
// log-probabilities must agree to `tolerance`. Returns how many positions were compared.
size_t compare_runs(const Generated& a, const Generated& b, double tolerance) {
  size_t compared = 0;
  for (size_t i = 0; i < a.tokens.size() && i < b.tokens.size(); ++i) {
    EXPECT_LE(std::fabs(a.logprobs[i] - b.logprobs[i]), tolerance) << "position " << i;
    ++compared;
    if (a.tokens[i] != b.tokens[i]) break;
  }
  return compared;
}

std::vector<int32_t> sequence(int length, int vocab, int salt) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < length; ++i) tokens.push_back(i == 0 ? 1 : 3 + (i * 37 + salt) % (vocab - 3));
  return tokens;
}

// One comparison of a GPU model with the CPU: the file, both models, and the bound.
struct Comparison {
  std::string name;
  ModelPtr cpu, gpu;
  double tolerance;
  bool exact;  // f32 weights kept in f32: the same greedy path throughout
};

// Param: 0 vanilla, else the number of PHOTON levels.
class GpuModels : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    REQUIRE_DEVICE();
    const int levels = GetParam();
    config_ = levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels);
    // One file per test (the name holds the parameter): ctest may run them side by side.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : name)
      if (ch == '/') ch = '_';
    const std::string stem = std::string(PHOTON_BINARY_DIR) + "/gpu_model_" + name;
    f32_path_ = stem + "_f32.photon";
    bf16_path_ = stem + "_bf16.photon";
    photon::testing::write_test_model(config_, f32_path_, 11 + levels, photon::DType::F32);
    photon::testing::write_test_model(config_, bf16_path_, 11 + levels, photon::DType::BF16);
    const int meta = levels == 0 ? 4 : static_cast<int>(config_.block_tokens(levels));
    tokens_ = sequence(3 * meta + 41, config_.vocab_size, 11);
    prompt_ = sequence(meta + 5, config_.vocab_size, 3);
  }
  void TearDown() override {
    std::remove(f32_path_.c_str());
    std::remove(bf16_path_.c_str());
  }
  // bf16 weights at exact precision, f32 weights kept in f32, bf16 weights at bf16 precision (the
  // GPU's default), each against the CPU at the same precision.
  std::vector<Comparison> comparisons() const {
    std::vector<Comparison> all;
    all.push_back({bf16_path_ + " exact", load(bf16_path_, "cpu"),
                   load(bf16_path_, "cuda", "exact"), kBf16Tolerance, false});
    all.push_back(
        {f32_path_ + " exact", load(f32_path_, "cpu"), load_exact(f32_path_), kF32Tolerance, true});
    all.push_back({bf16_path_ + " bf16", load(bf16_path_, "cpu", "bf16"), load(bf16_path_, "cuda"),
                   kBf16Tolerance, false});
    for (const Comparison& c : all) {
      EXPECT_EQ(std::string(photon_model_precision(c.gpu.get())),
                std::string(photon_model_precision(c.cpu.get())));
    }
    return all;
  }
  std::vector<photon_mode> modes() const {
    if (GetParam() == 0) return {PHOTON_MODE_AUTO};
    if (GetParam() == 1) return {PHOTON_MODE_HIERGEN};
    return {PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN};
  }

  ModelConfig config_;
  std::string f32_path_, bf16_path_;
  std::vector<int32_t> tokens_, prompt_;
};

TEST_P(GpuModels, ScoresMatchTheCpu) {
  for (const Comparison& c : comparisons()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.cpu && c.gpu);
    EXPECT_EQ(std::string(photon_model_device(c.gpu.get())).rfind("cuda:", 0), 0u);
    const std::vector<float> want = score(c.cpu.get(), tokens_), got = score(c.gpu.get(), tokens_);
    double worst = 0.0;
    for (size_t i = 1; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "position " << i;
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    EXPECT_LE(worst, c.tolerance);
    std::printf("[          ] %s: max |logprob difference| %.2e over %zu tokens\n", c.name.c_str(),
                worst, want.size() - 1);
  }
}

TEST_P(GpuModels, GenerationMatchesTheCpu) {
  for (const Comparison& c : comparisons()) {
    for (photon_mode mode : modes()) {
      SCOPED_TRACE(c.name + ", mode " + std::to_string(mode));
      const Generated want = prefill_and_generate(c.cpu.get(), mode, prompt_, 24);
      const Generated got = prefill_and_generate(c.gpu.get(), mode, prompt_, 24);
      ASSERT_EQ(got.tokens.size(), 24u);
      const size_t compared = compare_runs(want, got, c.tolerance);
      // f32 weights: the same greedy path throughout; bf16: at least the first few tokens.
      EXPECT_GE(compared, c.exact ? 24u : 4u);
    }
  }
}

// Sessions with 16-bit KV caches compute on the GPU what they compute on the CPU: both round each
// key and value to nearest even once, so with f32 weights kept in f32 the f32 bound applies.
TEST_P(GpuModels, SixteenBitCachesMatchTheCpu) {
  const ModelPtr cpu = load(f32_path_, "cpu");
  const ModelPtr gpu = load_exact(f32_path_);
  for (photon_mode mode : modes())
    for (photon_dtype type : {PHOTON_DTYPE_BF16, PHOTON_DTYPE_F16}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + ", kv type " + std::to_string(type));
      SessionPtr on_cpu = session(cpu.get(), mode, 0.0f, 0, 0, type);
      SessionPtr on_gpu = session(gpu.get(), mode, 0.0f, 0, 0, type);
      std::vector<float> want(tokens_.size()), got(tokens_.size());
      ASSERT_EQ(photon_session_prefill_logprobs(on_cpu.get(), tokens_.data(), tokens_.size(),
                                                want.data()),
                PHOTON_OK)
          << photon_last_error();
      ASSERT_EQ(
          photon_session_prefill_logprobs(on_gpu.get(), tokens_.data(), tokens_.size(), got.data()),
          PHOTON_OK)
          << photon_last_error();
      for (size_t i = 1; i < want.size(); ++i)
        EXPECT_LE(std::fabs(got[i] - want[i]), kF32Tolerance) << "position " << i;
      EXPECT_GE(compare_runs(generate(on_cpu.get(), 16), generate(on_gpu.get(), 16), kF32Tolerance),
                16u);
      uint64_t cpu_bytes = 0, gpu_bytes = 0;
      ASSERT_EQ(photon_session_kv_bytes(on_cpu.get(), 1, &cpu_bytes, nullptr), PHOTON_OK);
      ASSERT_EQ(photon_session_kv_bytes(on_gpu.get(), 1, &gpu_bytes, nullptr), PHOTON_OK);
      EXPECT_EQ(gpu_bytes, cpu_bytes);
    }
}

// photon_session_prefill_batch and photon_session_generate_batch on the GPU give every session
// what it gets alone there, with sessions of every kv type in one batch. At exact precision the
// same tokens and log-probabilities within 1e-3. At bf16 precision a batch's GEMMs may sum in
// another order than a session's alone, and a sum that lands on the other side of a bf16 rounding
// moves what follows by a bf16 unit, so there: the bf16 bound up to the first differing token.
TEST_P(GpuModels, BatchEqualsAlone) {
  for (const char* precision : {"exact", "bf16"}) {
    SCOPED_TRACE(precision);
    const bool exact = std::string(precision) == "exact";
    const ModelPtr gpu = load(bf16_path_, "cuda", precision);
    std::vector<SessionPtr> batch, alone;
    std::vector<photon_session*> handles;
    std::vector<std::vector<int32_t>> prompts;
    int k = 0;
    for (photon_mode mode : modes())
      for (float temperature : {0.0f, 0.9f})
        for (int p = 0; p < 2; ++p, ++k) {
          prompts.push_back(sequence(5 + 7 * k, config_.vocab_size, k));
          const photon_dtype kv_type = k % 3 == 0   ? PHOTON_DTYPE_F32
                                       : k % 3 == 1 ? PHOTON_DTYPE_BF16
                                                    : PHOTON_DTYPE_F16;
          batch.push_back(session(gpu.get(), mode, temperature, 100 + k, 0, kv_type));
          alone.push_back(session(gpu.get(), mode, temperature, 100 + k, 0, kv_type));
          ASSERT_EQ(photon_session_prefill(alone.back().get(), prompts.back().data(),
                                           prompts.back().size()),
                    PHOTON_OK);
          handles.push_back(batch.back().get());
        }
    ASSERT_EQ(photon::testing::prefill_batch(handles, prompts), PHOTON_OK) << photon_last_error();
    std::vector<Generated> collected(handles.size());
    ASSERT_EQ(photon_session_generate_batch(handles.data(), handles.size(), 20,
                                            photon::testing::collect_batch, &collected, nullptr),
              PHOTON_OK)
        << photon_last_error();
    for (size_t i = 0; i < alone.size(); ++i) {
      const Generated single = generate(alone[i].get(), 20);
      if (!exact) {
        EXPECT_GE(compare_runs(single, collected[i], kBf16Tolerance), 4u) << "session " << i;
        continue;
      }
      EXPECT_EQ(collected[i].tokens, single.tokens) << "session " << i;
      for (size_t j = 0; j < single.logprobs.size() && j < collected[i].logprobs.size(); ++j)
        EXPECT_NEAR(collected[i].logprobs[j], single.logprobs[j], 1e-3) << i << ", " << j;
    }
  }
}

// The serving engine on the GPU (exact precision): requests of every mode, kv type and sampler
// give the tokens of a session alone on the same GPU and its log-probabilities within 1e-3, run
// together; again under a memory budget of half their peak, which pauses some of them (saved
// to host memory and restored on the device); and again submitted twice each with a prefix
// cache, so that every second copy starts from its prompt's state restored on the device.
TEST_P(GpuModels, EngineRequestsEqualSessionsAlone) {
  const ModelPtr gpu = load(bf16_path_, "cuda", "exact");
  struct Ask {
    std::vector<int32_t> prompt;
    photon_mode mode;
    float temperature;
    photon_dtype kv_type;
  };
  std::vector<Ask> asks;
  int k = 0;
  for (photon_mode mode : modes())
    for (float temperature : {0.0f, 0.9f})
      for (int p = 0; p < 2; ++p, ++k)
        asks.push_back({sequence(5 + 3 * k, config_.vocab_size, k), mode, temperature,
                        k % 2 ? PHOTON_DTYPE_BF16 : PHOTON_DTYPE_F32});
  // Past the first 64 and 128 positions of every growing cache, within the 256-token context.
  constexpr int32_t kTokens = 200;
  std::vector<Generated> alone;
  for (size_t i = 0; i < asks.size(); ++i) {
    SessionPtr s =
        session(gpu.get(), asks[i].mode, asks[i].temperature, 300 + i, 0, asks[i].kv_type);
    EXPECT_EQ(photon_session_prefill(s.get(), asks[i].prompt.data(), asks[i].prompt.size()),
              PHOTON_OK);
    alone.push_back(generate(s.get(), kTokens));
  }
  uint64_t idle = 0;
  ASSERT_EQ(photon_model_memory(gpu.get(), &idle, nullptr, 0), PHOTON_OK);
  double unbudgeted_peak = 0;
  enum class Run { Together, Budgeted, Twice };
  for (const Run run : {Run::Together, Run::Budgeted, Run::Twice}) {
    SCOPED_TRACE(run == Run::Together   ? "together"
                 : run == Run::Budgeted ? "under a memory budget"
                                        : "each twice, with a prefix cache");
    const bool budgeted = run == Run::Budgeted;
    photon_engine_options* eo = nullptr;
    ASSERT_EQ(photon_engine_options_create(&eo), PHOTON_OK);
    const uint64_t budget = budgeted ? static_cast<uint64_t>(unbudgeted_peak / 2) : 0;
    ASSERT_EQ(photon_engine_options_set_memory_budget(eo, budget), PHOTON_OK);
    ASSERT_EQ(photon_engine_options_set_step_tokens(eo, 64), PHOTON_OK);
    if (run == Run::Twice) {
      ASSERT_EQ(photon_engine_options_set_prefix_cache(eo, uint64_t(256) << 20), PHOTON_OK);
    }
    photon_engine* engine = nullptr;
    ASSERT_EQ(photon_engine_create(gpu.get(), eo, &engine), PHOTON_OK) << photon_last_error();
    photon_engine_options_free(eo);
    const size_t copies = run == Run::Twice ? 2 : 1;
    std::vector<Generated> got(asks.size() * copies);
    std::vector<photon_request*> requests;
    for (size_t c = 0; c < got.size(); ++c) {
      const size_t i = c % asks.size();
      photon_session_options* so = nullptr;
      ASSERT_EQ(photon_session_options_create(&so), PHOTON_OK);
      photon_session_options_set_mode(so, asks[i].mode);
      photon_session_options_set_temperature(so, asks[i].temperature);
      photon_session_options_set_seed(so, 300 + i);
      photon_session_options_set_ignore_eos(so, 1);
      ASSERT_EQ(photon_session_options_set_kv_type(so, asks[i].kv_type), PHOTON_OK);
      photon_request_options* ro = nullptr;
      ASSERT_EQ(photon_request_options_create(&ro), PHOTON_OK);
      ASSERT_EQ(photon_request_options_set_session_options(ro, so), PHOTON_OK);
      ASSERT_EQ(photon_request_options_set_prompt(ro, asks[i].prompt.data(), asks[i].prompt.size()),
                PHOTON_OK);
      ASSERT_EQ(photon_request_options_set_max_tokens(ro, kTokens), PHOTON_OK);
      ASSERT_EQ(photon_request_options_set_callback(ro, &photon::testing::collect, &got[c]),
                PHOTON_OK);
      photon_request* r = nullptr;
      ASSERT_EQ(photon_engine_submit(engine, ro, &r), PHOTON_OK) << photon_last_error();
      requests.push_back(r);
      photon_request_options_free(ro);
      photon_session_options_free(so);
    }
    int32_t left = 1;
    for (int step = 0; left > 0; ++step) {
      ASSERT_LT(step, 20000);
      ASSERT_EQ(photon_engine_step(engine, &left), PHOTON_OK) << photon_last_error();
      if (budgeted) {
        double in_use = 0;
        ASSERT_EQ(photon_engine_get_stat(engine, PHOTON_ENGINE_MEMORY_IN_USE, &in_use), PHOTON_OK);
        ASSERT_LE(in_use, static_cast<double>(budget)) << "after step " << step;
      }
    }
    double peak = 0, pauses = 0, hits = 0;
    ASSERT_EQ(photon_engine_get_stat(engine, PHOTON_ENGINE_MEMORY_PEAK, &peak), PHOTON_OK);
    ASSERT_EQ(photon_engine_get_stat(engine, PHOTON_ENGINE_PAUSES, &pauses), PHOTON_OK);
    ASSERT_EQ(photon_engine_get_stat(engine, PHOTON_ENGINE_PREFIX_HITS, &hits), PHOTON_OK);
    if (budgeted) {
      EXPECT_GT(pauses, 0) << "the budget paused nothing";
    }
    if (run == Run::Together) unbudgeted_peak = peak;
    // Each second copy waits for its first to read the prompt, then restores that state.
    EXPECT_EQ(hits, run == Run::Twice ? double(asks.size()) : 0.0);
    for (size_t c = 0; c < got.size(); ++c) {
      const size_t i = c % asks.size();
      EXPECT_EQ(got[c].tokens, alone[i].tokens) << "request " << c;
      for (size_t j = 0; j < got[c].logprobs.size() && j < alone[i].logprobs.size(); ++j)
        EXPECT_NEAR(got[c].logprobs[j], alone[i].logprobs[j], 1e-3) << c << ", " << j;
      photon_request_free(requests[c]);
    }
    photon_engine_free(engine);
    uint64_t after = 0;
    ASSERT_EQ(photon_model_memory(gpu.get(), &after, nullptr, 0), PHOTON_OK);
    EXPECT_EQ(after, idle);
  }
}

// A state saved on one device restores on the other and continues as it would have on the first,
// within the tolerance of the two devices' arithmetic.
TEST_P(GpuModels, SessionsMoveBetweenCpuAndGpu) {
  for (const Comparison& c : comparisons()) {
    for (photon_mode mode : modes())
      for (const photon_model* from : {c.cpu.get(), c.gpu.get()}) {
        SCOPED_TRACE(c.name + ", mode " + std::to_string(mode) + ", saved on " +
                     photon_model_device(from));
        SessionPtr original = session(from, mode);
        ASSERT_EQ(photon_session_prefill(original.get(), prompt_.data(), prompt_.size()),
                  PHOTON_OK);
        generate(original.get(), 7);
        size_t size = 0;
        ASSERT_EQ(photon_session_save(original.get(), nullptr, 0, &size),
                  PHOTON_ERR_BUFFER_TOO_SMALL);
        std::vector<uint8_t> state(size);
        ASSERT_EQ(photon_session_save(original.get(), state.data(), size, &size), PHOTON_OK)
            << photon_last_error();
        Generated continued[2];
        int d = 0;
        for (const photon_model* to : {c.cpu.get(), c.gpu.get()}) {
          photon_session* restored = nullptr;
          ASSERT_EQ(photon_session_restore(to, state.data(), size, &restored), PHOTON_OK)
              << photon_last_error();
          EXPECT_EQ(photon_session_position(restored), photon_session_position(original.get()));
          continued[d++] = generate(restored, 10);
          photon_session_free(restored);
        }
        EXPECT_GE(compare_runs(continued[0], continued[1], c.tolerance), c.exact ? 10u : 2u);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GpuModels, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& levels) {
                           return levels.param == 0 ? std::string("vanilla")
                                                    : "photon_L" + std::to_string(levels.param);
                         });

// The shipped trained model at exact precision: greedy tokens equal the CPU's for the first 32
// positions in at least 18 of 20 prompts.
TEST(GpuTrainedModel, GreedyTokensMatchTheCpu) {
  REQUIRE_DEVICE();
  const std::string& path = photon::testing::kTrainedModelPath;
  const ModelPtr cpu = load(path, "cpu"), gpu = load(path, "cuda", "exact");
  int equal = 0;
  for (const std::string& text : photon::testing::kTrainedModelPrompts) {
    const std::vector<int32_t> prompt = photon::testing::tokenize_text(cpu.get(), text);
    const Generated want = prefill_and_generate(cpu.get(), PHOTON_MODE_AUTO, prompt, 32);
    const Generated got = prefill_and_generate(gpu.get(), PHOTON_MODE_AUTO, prompt, 32);
    if (want.tokens == got.tokens) {
      ++equal;
    } else {
      size_t first = 0;
      while (first < want.tokens.size() && want.tokens[first] == got.tokens[first]) ++first;
      std::printf("[          ] \"%s\": first difference at position %zu\n", text.c_str(), first);
    }
  }
  std::printf("[          ] %d of 20 prompts: 32 greedy tokens equal\n", equal);
  EXPECT_GE(equal, 18);
}

// The shipped trained model at bf16 precision, the GPU's default, against the CPU's exact
// computation, as users judge such modes: the perplexity of a held passage within 1%, greedy
// tokens equal at >= 90% of 64 positions after each of 20 prompts.
TEST(GpuTrainedModel, Bf16KeepsTheQualityOfTheCpu) {
  REQUIRE_DEVICE();
  const std::string& path = photon::testing::kTrainedModelPath;
  const ModelPtr cpu = load(path, "cpu"), gpu = load(path, "cuda");
  ASSERT_STREQ(photon_model_precision(gpu.get()), "bf16");
  photon::testing::expect_quality_of(cpu.get(), gpu.get(), "CPU exact, GPU bf16");
}

// Create and free a thousand sessions (each prefilled): the device's free memory ends where the
// first ones left it.
TEST(GpuSessions, ThousandSessionsLeaveDeviceMemoryFlat) {
  REQUIRE_DEVICE();
  const std::string path = std::string(PHOTON_BINARY_DIR) + "/gpu_cycles.photon";
  photon::testing::write_test_model(photon::testing::tiny_photon(2), path, 3);
  const ModelPtr gpu = load(path, "cuda");
  const std::vector<int32_t> prompt = sequence(40, 512, 1);
  auto cycle = [&](photon_mode mode) {
    SessionPtr s = session(gpu.get(), mode, 0.0f, 0, 128);
    ASSERT_EQ(photon_session_prefill(s.get(), prompt.data(), prompt.size()), PHOTON_OK);
    generate(s.get(), 2);
  };
  for (int i = 0; i < 4; ++i) cycle(i % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN);
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  uint64_t held_before = 0, held_after = 0, peak = 0;
  ASSERT_EQ(photon_model_memory(gpu.get(), &held_before, nullptr, 1), PHOTON_OK);
  for (int i = 0; i < 1000; ++i) cycle(i % 2 ? PHOTON_MODE_RECGEN : PHOTON_MODE_HIERGEN);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(free_after + (size_t{2} << 20), free_before)
      << "device memory grew by " << (free_before - free_after) << " bytes";
  // The model's own count: back where it was, and every cycle's session showed in the peak.
  ASSERT_EQ(photon_model_memory(gpu.get(), &held_after, &peak, 0), PHOTON_OK);
  EXPECT_EQ(held_after, held_before);
  EXPECT_GT(peak, held_before);
  std::remove(path.c_str());
}

// A session whose caches cannot fit is PHOTON_ERR_OUT_OF_MEMORY; the model and a session made
// before it go on working.
TEST(GpuSessions, AContextTooLargeIsOutOfMemory) {
  REQUIRE_DEVICE();
  ModelConfig c = photon::testing::tiny_vanilla();
  c.max_seq_len = 1 << 24;
  c.dim = 256;
  // 2^24 tokens of f32 KV: 256 GiB of keys alone, more than any one GPU holds, so the first
  // cache allocation fails and the test never fills the device.
  c.stack = photon::testing::tiny_stack(16, 8, 8, 32, 256);
  const std::string path = std::string(PHOTON_BINARY_DIR) + "/gpu_oom.photon";
  photon::testing::write_test_model(c, path, 4);
  const ModelPtr gpu = load(path, "cuda");
  SessionPtr before = session(gpu.get(), PHOTON_MODE_AUTO, 0.0f, 0, 64);
  const std::vector<int32_t> prompt = sequence(10, c.vocab_size, 2);
  ASSERT_EQ(photon_session_prefill(before.get(), prompt.data(), prompt.size()), PHOTON_OK);

  photon_session_options* o = nullptr;
  ASSERT_EQ(photon_session_options_create(&o), PHOTON_OK);
  ASSERT_EQ(photon_session_options_set_context_length(o, 1 << 24), PHOTON_OK);
  photon_session* huge = nullptr;
  EXPECT_EQ(photon_session_create(gpu.get(), o, &huge), PHOTON_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(huge, nullptr);
  std::printf("[          ] %s\n", photon_last_error());
  photon_session_options_free(o);

  EXPECT_EQ(generate(before.get(), 5).tokens.size(), 5u);
  SessionPtr after = session(gpu.get(), PHOTON_MODE_AUTO, 0.0f, 0, 64);
  ASSERT_EQ(photon_session_prefill(after.get(), prompt.data(), prompt.size()), PHOTON_OK);
  EXPECT_EQ(generate(after.get(), 5).tokens.size(), 5u);
  std::remove(path.c_str());
}

}  // namespace
