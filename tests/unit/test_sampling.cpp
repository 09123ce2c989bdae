// The CPU sampler (backend/cpu/sample.h, every backend's reference) against an independent
// float64 computation of the distribution that include/photon.h defines for the sampling options
// (logit bias and penalties, then temperature and top-k, then min-p and top-p), on real next-token
// logits of a small model with peaked, trained-like weights (tests/unit/test_models.h). Two
// checks: for the draw u = sample_uniform(seed, position), the token must be exactly the
// inverse-CDF pick of the reference distribution; and the frequencies over many seeds must pass a
// chi-square test against it (which does not depend on the order the draw walks the tokens in).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/sample.h"
#include "core/sampling.h"
#include "photon.h"
#include "test_models.h"

namespace photon {
namespace {

// Membership of a token in the kept set closer than this to a threshold is left to rounding (the
// sampler applies penalties and bias to float logits): such cases are reported, and must not occur
// in the data below.
constexpr double kMargin = 1e-5;

struct Options {
  const char* name;
  float temperature;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float penalty = 1.0f;
  int32_t last_n = 64;
  float presence = 0.0f;
  float frequency = 0.0f;
  bool biased = false;  // kBias below

  SamplerConfig config(uint64_t seed) const {
    SamplerConfig c;
    c.temperature = temperature;
    c.top_k = top_k;
    c.top_p = top_p;
    c.min_p = min_p;
    c.repetition_penalty = penalty;
    c.repetition_last_n = last_n;
    c.presence_penalty = presence;
    c.frequency_penalty = frequency;
    if (biased) c.logit_bias = kBias;
    c.seed = seed;
    return c;
  }

  // BOS (in every context), and two ids the contexts below do not hold.
  static inline const std::vector<LogitBias> kBias = {{1, -1.5f}, {100, 4.0f}, {200, 5.5f}};
};

const Options kOptions[] = {
    {"temperature 0.6", 0.6f},
    {"temperature 1.8", 1.8f},
    {"top-k 8", 0.8f, 8},
    {"top-k 1", 1.3f, 1},
    {"top-p 0.9", 0.7f, 0, 0.9f},
    {"top-p 0.4", 1.5f, 0, 0.4f},
    {"min-p 0.05", 0.9f, 0, 1.0f, 0.05f},
    {"min-p 0.3", 1.6f, 0, 1.0f, 0.3f},
    {"top-k 40, top-p 0.8, min-p 0.02", 1.2f, 40, 0.8f, 0.02f},
    {"top-k above the vocabulary, top-p 0.95", 0.9f, 1 << 20, 0.95f},
    {"penalty 1.3 over 16", 0.8f, 0, 1.0f, 0.0f, 1.3f, 16},
    {"penalty 2, top-k 20", 1.1f, 20, 1.0f, 0.0f, 2.0f, 64},
    {"penalty 1.5 over 8, top-p 0.9, min-p 0.05", 0.75f, 0, 0.9f, 0.05f, 1.5f, 8},
    {"greedy, penalty 1.8", 0.0f, 0, 1.0f, 0.0f, 1.8f, 64},
    {"presence 0.8, frequency 0.5", 0.9f, 0, 1.0f, 0.0f, 1.0f, 64, 0.8f, 0.5f},
    {"frequency -0.6 over 12, top-k 30", 1.2f, 30, 1.0f, 0.0f, 1.0f, 12, 0.0f, -0.6f},
    {"penalty 1.2, presence 0.4, frequency 0.9, top-p 0.85", 0.8f, 0, 0.85f, 0.0f, 1.2f, 64, 0.4f,
     0.9f},
    {"greedy, presence 1.5", 0.0f, 0, 1.0f, 0.0f, 1.0f, 64, 1.5f},
    {"logit bias", 1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 0.0f, 0.0f, true},
    {"logit bias, min-p 0.05, frequency 0.3", 0.9f, 0, 1.0f, 0.05f, 1.0f, 64, 0.0f, 0.3f, true},
    {"greedy, logit bias", 0.0f, 0, 1.0f, 0.0f, 1.0f, 64, 0.0f, 0.0f, true},
};

// The distribution photon.h defines, computed directly in float64.
struct Distribution {
  std::vector<double> p;       // [vocab], 0 outside the kept set
  std::vector<int32_t> order;  // the kept tokens in the order the draw walks them
  std::string unclear;         // non-empty if rounding could change the kept set
};

Distribution reference(const std::vector<float>& logits, const Options& o,
                       const std::vector<int32_t>& history, double margin = kMargin) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<double> z(logits.begin(), logits.end());
  if (o.biased)
    for (const LogitBias& entry : Options::kBias) z[entry.token] += entry.bias;
  if (o.last_n > 0) {
    const size_t n = std::min(history.size(), static_cast<size_t>(o.last_n));
    std::map<int32_t, int> counts;
    for (auto t = history.end() - static_cast<long>(n); t != history.end(); ++t) ++counts[*t];
    for (const auto& [t, count] : counts) {
      z[t] = z[t] > 0 ? z[t] / o.penalty : z[t] * o.penalty;
      z[t] -= o.presence + count * double(o.frequency);
    }
  }
  std::vector<int32_t> ranked(vocab);
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });

  Distribution d;
  d.p.assign(vocab, 0.0);
  if (o.temperature == 0.0f) {  // greedy: the most likely token, the lowest id on ties
    d.p[ranked[0]] = 1.0;
    d.order = {ranked[0]};
    if (z[ranked[0]] - z[ranked[1]] < margin) d.unclear = "the top two logits nearly tie";
    return d;
  }
  size_t n = static_cast<size_t>(vocab);
  if (o.top_k > 0 && o.top_k < vocab) {
    n = static_cast<size_t>(o.top_k);
    if (z[ranked[n - 1]] - z[ranked[n]] < margin) d.unclear = "top-k boundary";
  }
  std::vector<double> q(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += q[i] = std::exp((z[ranked[i]] - z[ranked[0]]) / o.temperature);
  for (double& x : q) x /= sum;

  size_t keep = n;
  if (o.min_p > 0.0f) {
    size_t passing = 0;
    for (size_t i = 0; i < n; ++i) {
      passing += q[i] >= o.min_p * q[0];
      if (std::fabs(q[i] / q[0] - o.min_p) < margin) d.unclear = "min-p boundary";
    }
    keep = std::min(keep, passing);
  }
  if (o.top_p < 1.0f) {
    double cumulative = 0;
    size_t m = 0;
    while (m < n && cumulative < o.top_p) cumulative += q[m++];
    if (std::fabs(cumulative - o.top_p) < margin ||
        std::fabs(cumulative - q[m - 1] - o.top_p) < margin)
      d.unclear = "top-p boundary";
    keep = std::min(keep, m);
  }
  keep = std::max<size_t>(keep, 1);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += q[i];
  for (size_t i = 0; i < keep; ++i) d.p[ranked[i]] = q[i] / kept;
  d.order.assign(ranked.begin(), ranked.begin() + static_cast<long>(keep));
  // The draw walks the tokens in order of probability when a filter ranked them, else by id.
  const bool ranked_draw = (o.top_k > 0 && o.top_k < vocab) || o.top_p < 1.0f || o.min_p > 0.0f;
  if (!ranked_draw) std::sort(d.order.begin(), d.order.end());
  return d;
}

// Upper quantile of the chi-square distribution with `dof` degrees of freedom at tail probability
// 1e-6 (Wilson-Hilferty; z = 4.753 is the standard normal's 1e-6 quantile).
double chi_square_limit(int dof) {
  const double k = dof, z = 4.753;
  return k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
}

// Real next-token logits, up to a constant: the model's log-probabilities of every continuation
// of `context` (teacher-forced scores), shifted so that the third most likely token sits just above
// zero and the repetition penalty meets logits of both signs among the likely tokens.
std::vector<float> next_token_logits(photon_model* model, std::vector<int32_t> context) {
  const int vocab = photon_model_vocab_size(model);
  std::vector<double> logprob(vocab);
  context.push_back(0);
  std::vector<float> scores(context.size());
  for (int t = 0; t < vocab; ++t) {
    context.back() = t;
    EXPECT_EQ(photon_model_score(model, context.data(), context.size(), scores.data()), PHOTON_OK)
        << photon_last_error();
    logprob[t] = scores.back();
  }
  std::vector<double> sorted = logprob;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  std::vector<float> logits(vocab);
  for (int t = 0; t < vocab; ++t) logits[t] = static_cast<float>(logprob[t] - sorted[2] + 0.25);
  return logits;
}

struct Case {
  std::string name;
  std::vector<float> logits;
  std::vector<int32_t> history;  // what the repetition penalty looks at
  int64_t position;
};

// The context, then the six most likely tokens, most likely last, each followed by an unlikely
// one: a short penalty window sees only some of them.
std::vector<int32_t> history_for(const std::vector<int32_t>& context,
                                 const std::vector<float>& logits) {
  std::vector<int32_t> ranked(logits.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<int32_t> history = context;
  for (int i = 5; i >= 0; --i) {
    history.push_back(ranked[i]);
    history.push_back(ranked[ranked.size() - 1 - static_cast<size_t>(i) * 37]);
  }
  return history;
}

class SamplerReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = new std::vector<Case>();
    const std::string path = std::string(PHOTON_BINARY_DIR) + "/test_sampling.photon";
    testing::write_test_model(testing::tiny_vanilla(), path, 5);
    photon_model* tiny = nullptr;
    ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &tiny), PHOTON_OK) << photon_last_error();
    for (int c = 0; c < 3; ++c) {
      std::vector<int32_t> tokens = {1};
      for (int i = 1; i < 6 + 5 * c; ++i) tokens.push_back(3 + (i * 97 + c * 31) % 500);
      add("context " + std::to_string(c), tiny, tokens);
    }
    photon_model_free(tiny);
    std::remove(path.c_str());
  }
  static void TearDownTestSuite() { delete cases_; }

  static void add(const std::string& name, photon_model* model,
                  const std::vector<int32_t>& context) {
    std::vector<float> logits = next_token_logits(model, context);
    std::vector<int32_t> history = history_for(context, logits);
    cases_->push_back(
        {name, std::move(logits), std::move(history), static_cast<int64_t>(history.size())});
  }

  static std::vector<Case>* cases_;
};

std::vector<Case>* SamplerReference::cases_ = nullptr;

// Draws `seeds` tokens of case `c` under options `o`, each of which must be the inverse-CDF pick of
// the reference distribution for its draw u, unless u lies within rounding of a cumulative sum.
void expect_inverse_cdf_picks(cpu::Sampler& sampler, const Case& c, const Options& o, int seeds,
                              double margin = kMargin) {
  SCOPED_TRACE(c.name + ", " + o.name);
  const Distribution d = reference(c.logits, o, c.history, margin);
  ASSERT_EQ(d.unclear, "") << "choose other options or another context";
  int near_boundary = 0;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(seeds); ++seed) {
    const int64_t position = c.position + static_cast<int64_t>(seed % 7);
    const double u = sample_uniform(seed, position);
    int32_t want = d.order.back();
    double cumulative = 0;
    bool clear = true;
    for (int32_t t : d.order) {
      cumulative += d.p[t];
      if (std::fabs(u - cumulative) < 1e-9) clear = false;
      if (u < cumulative) {
        want = t;
        break;
      }
    }
    std::vector<float> logits = c.logits;
    const int32_t got = sampler.sample(o.config(seed), logits.data(),
                                       static_cast<int>(logits.size()), position, c.history);
    ASSERT_GE(got, 0);
    ASSERT_LT(got, static_cast<int32_t>(logits.size()));
    EXPECT_GT(d.p[got], 0.0) << "seed " << seed << ": token " << got
                             << " lies outside the kept set";
    if (!clear) {
      ++near_boundary;
      continue;
    }
    EXPECT_EQ(got, want) << "seed " << seed << ", u = " << u << ": reference p(got) = " << d.p[got]
                         << ", p(want) = " << d.p[want];
  }
  EXPECT_LE(near_boundary, 1);
}

TEST_F(SamplerReference, EachDrawIsTheInverseCdfPickOfTheReference) {
  cpu::Sampler sampler;
  for (const Case& c : *cases_)
    for (const Options& o : kOptions) expect_inverse_cdf_picks(sampler, c, o, 500);
}

// Rows of 32,000 ids from nearly flat to peaked, so that top-p keeps anything from a few ids to
// most of the row: the sampler ranks only the likeliest tokens that carry the cut's mass, and
// every depth of that selection must give the reference's pick.
TEST(SamplerLargeRows, EachDrawIsTheInverseCdfPickOfTheReference) {
  const Options options[] = {
      {"top-p 0.9", 0.8f, 0, 0.9f},
      {"top-p 0.5", 1.0f, 0, 0.5f},
      {"min-p 0.05, top-p 0.95", 1.0f, 0, 0.95f, 0.05f},
      {"top-k 2000, top-p 0.7", 1.0f, 2000, 0.7f},
  };
  cpu::Sampler sampler;
  for (const double spread : {0.05, 1.0, 4.0}) {
    // Logits spread * (sum of three uniforms - 1.5), from a counter hash (portable, unlike
    // <random>'s distributions).
    Case c{"32,000 ids, spread " + std::to_string(spread), std::vector<float>(32000), {}, 9};
    uint64_t state = 7;
    auto uniform = [&state] {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    };
    for (float& logit : c.logits)
      logit = static_cast<float>(spread * (uniform() + uniform() + uniform() - 1.5));
    // No penalty or bias: both sides weigh the same float logits in float64, in other orders, so
    // a far smaller margin than kMargin separates rounding from a wrong cut.
    for (const Options& o : options) expect_inverse_cdf_picks(sampler, c, o, 100, 1e-9);
  }
}

TEST_F(SamplerReference, FrequenciesOverSeedsFollowTheReference) {
  constexpr int kSeeds = 5000;
  cpu::Sampler sampler;
  for (const Case& c : {cases_->front()}) {
    for (const Options& o : kOptions) {
      if (o.temperature == 0.0f) continue;
      SCOPED_TRACE(c.name + ", " + o.name);
      const Distribution d = reference(c.logits, o, c.history);
      std::vector<int> counts(c.logits.size(), 0);
      for (uint64_t seed = 0; seed < kSeeds; ++seed) {
        std::vector<float> logits = c.logits;
        ++counts[sampler.sample(o.config(1000 + seed), logits.data(),
                                static_cast<int>(logits.size()), c.position, c.history)];
      }
      // Pearson's statistic, the least likely tokens pooled until each bin expects at least 5 (in
      // ascending order, nothing is left over once the largest token has its bin).
      std::vector<std::pair<double, int>> kept;  // (expected, observed)
      for (size_t t = 0; t < counts.size(); ++t) {
        if (d.p[t] > 0.0)
          kept.emplace_back(d.p[t] * kSeeds, counts[t]);
        else
          EXPECT_EQ(counts[t], 0) << "token " << t << " lies outside the kept set";
      }
      std::sort(kept.begin(), kept.end());
      double statistic = 0, expected = 0, observed = 0;
      int bins = 0;
      for (const auto& [e, n] : kept) {
        expected += e;
        observed += n;
        if (expected < 5.0) continue;
        statistic += (observed - expected) * (observed - expected) / expected;
        ++bins;
        expected = observed = 0;
      }
      if (bins > 1) {
        EXPECT_LT(statistic, chi_square_limit(bins - 1)) << bins << " bins";
      }
    }
  }
}

}  // namespace
}  // namespace photon
