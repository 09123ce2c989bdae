// Log-softmax statistics and token sampling on the device against cpu::log_sum_exp and
// cpu::Sampler: the same logits, seed and position give the same token.
#include "backend/cpu/logprob.h"
#include "backend/cpu/sample.h"
#include "backend/cuda/logprob.h"
#include "backend/cuda/sample.h"
#include "gpu_test.h"

namespace photon::gpu_test {
namespace {

using GpuSampling = GpuTest;

TEST_F(GpuSampling, LogSoftmaxMatchesCpu) {
  const int n = 6, vocab = 32000;
  const std::vector<float> logits = random(size_t(n) * vocab, -12.0f, 12.0f);
  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) t = uniform_int(0, vocab - 1);
  targets[n - 1] = vocab;  // outside: NaN
  double* lse = poisoned<double>(n);
  float* logprob = poisoned<float>(n);
  cuda::log_softmax(upload(logits), n, vocab, upload(targets), lse, logprob, stream());
  const std::vector<double> got_lse = download(lse, n);
  const std::vector<float> got = download(logprob, n);
  for (int r = 0; r < n; ++r) {
    const float* row = logits.data() + size_t(r) * vocab;
    const double want = cpu::log_sum_exp(row, vocab);
    EXPECT_NEAR(got_lse[r], want, 1e-12 * std::fabs(want) + 1e-12) << "row " << r;
    if (r == n - 1) {
      EXPECT_TRUE(std::isnan(got[r]));
    } else {
      const float want_lp = static_cast<float>(row[targets[r]] - want);
      EXPECT_NEAR(got[r], want_lp, 1e-6f * std::fabs(want_lp)) << "row " << r;
    }
  }
}

struct Named {
  const char* name;
  SamplerConfig config;
};

SamplerConfig make(float temperature, int top_k, float top_p, float min_p, float penalty = 1.0f) {
  SamplerConfig c;
  c.temperature = temperature;
  c.top_k = top_k;
  c.top_p = top_p;
  c.min_p = min_p;
  c.repetition_penalty = penalty;
  return c;
}

TEST_F(GpuSampling, TokensMatchTheCpuSampler) {
  const Named configs[] = {
      {"greedy", make(0.0f, 0, 1.0f, 0.0f)},
      {"temperature", make(0.8f, 0, 1.0f, 0.0f)},
      {"top-k", make(1.0f, 40, 1.0f, 0.0f)},
      {"top-k 1", make(1.3f, 1, 1.0f, 0.0f)},
      {"top-p", make(0.7f, 0, 0.9f, 0.0f)},
      {"tiny top-p", make(1.0f, 0, 1e-6f, 0.0f)},
      {"min-p", make(1.0f, 0, 1.0f, 0.05f)},
      {"top-k, top-p and min-p", make(1.1f, 50, 0.8f, 0.01f)},
      {"top-k above the vocabulary", make(0.9f, 1 << 20, 0.95f, 0.0f)},
      {"penalised greedy", make(0.0f, 0, 1.0f, 0.0f, 1.3f)},
      {"penalised top-k", make(0.9f, 20, 1.0f, 0.0f, 1.5f)},
      {"penalised temperature", make(1.2f, 0, 1.0f, 0.0f, 0.8f)},
  };
  const int rows = 24, history = 100;
  for (int vocab : {32000, 1000, 7}) {
    for (bool ties : {false, true}) {
      // Ties: integer logits in [-3, 3] (and both zeros), where only the id order separates
      // candidates.
      std::vector<float> logits = random(size_t(rows) * vocab, -6.0f, 6.0f);
      if (ties)
        for (float& l : logits)
          l = std::round(l / 2.0f) == 0.0f ? (l < 0 ? -0.0f : 0.0f) : std::round(l / 2.0f);
      const float* device_logits = upload(logits);
      std::vector<std::vector<int32_t>> histories(rows);
      for (auto& h : histories)
        for (int i = 0; i < history; ++i) h.push_back(uniform_int(0, std::min(vocab, 50) - 1));
      for (const Named& named : configs) {
        SCOPED_TRACE(std::string(named.name) + ", vocab " + std::to_string(vocab) +
                     (ties ? ", ties" : ""));
        SamplerConfig config = named.config;
        std::vector<cuda::SampleParams> params;
        std::vector<int32_t> recent(size_t(rows) * config.repetition_last_n, -1);
        std::vector<int32_t> want(rows);
        cpu::Sampler sampler;
        for (int r = 0; r < rows; ++r) {
          config.seed = 1000 + r % 5;
          const int64_t position = uniform_int(0, 1 << 30);
          params.push_back(cuda::make_sample_params(config, position, histories[r].size()));
          const int used = params.back().recent_len;
          std::copy(histories[r].end() - used, histories[r].end(),
                    recent.begin() + size_t(r) * config.repetition_last_n);
          std::vector<float> row(logits.begin() + size_t(r) * vocab,
                                 logits.begin() + size_t(r + 1) * vocab);
          want[r] = sampler.sample(config, row.data(), vocab, position, histories[r]);
        }
        int32_t* tokens = poisoned<int32_t>(rows);
        cuda::sample(device_logits, rows, vocab, params, recent, config.repetition_last_n, tokens,
                     scratch(), stream());
        EXPECT_EQ(download(tokens, rows), want);
      }
      EXPECT_EQ(download(device_logits, logits.size()), logits) << "the logits must stay as given";
    }
  }
}

TEST_F(GpuSampling, UniformDrawsFollowTheCountersBitForBit) {
  // Equal logits over V = 2^16 candidates and no cut: the running sums are the integers 1..V,
  // exact in double, so the token is exactly floor(u * V).
  const int vocab = 1 << 16, rows = 64;
  const std::vector<float> logits(size_t(rows) * vocab, 0.25f);
  std::vector<cuda::SampleParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 1.0f;
    params[r].seed = 77;
    params[r].position = r * 1009;
  }
  int32_t* tokens = poisoned<int32_t>(rows);
  cuda::sample(upload(logits), rows, vocab, params, {}, 0, tokens, scratch(), stream());
  const std::vector<int32_t> got = download(tokens, rows);
  for (int r = 0; r < rows; ++r) {
    const double u = sample_uniform(77, r * 1009);
    EXPECT_EQ(got[r], static_cast<int32_t>(std::floor(u * vocab))) << "row " << r;
  }
}

}  // namespace
}  // namespace photon::gpu_test
