#include "backend/cpu/sample.h"

#include <algorithm>
#include <cmath>

namespace photon::cpu {

namespace {

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;  // ties keep the lowest id
  return best;
}

}  // namespace

int32_t Sampler::sample(const SamplerConfig& cfg, float* logits, int vocab, int64_t position,
                        std::span<const int32_t> recent) {
  for (const LogitBias& entry : cfg.logit_bias) logits[entry.token] += entry.bias;
  if (cfg.penalized())
    for (const auto& [token, count] : penalty_counts(cfg, recent))
      logits[token] = penalized_logit(cfg, logits[token], count);
  if (cfg.temperature <= 0.0f) return argmax(logits, vocab);

  // Candidates by descending logit (ties by id), cut by top-k, then softmax at the temperature.
  candidates_.resize(vocab);
  for (int32_t i = 0; i < vocab; ++i) candidates_[i] = {logits[i], i};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = static_cast<size_t>(vocab);
  if (cfg.top_k > 0 && cfg.top_k < vocab) {
    keep = static_cast<size_t>(cfg.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else if (cfg.top_p < 1.0f || cfg.min_p > 0.0f) {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  float max = -INFINITY;
  for (const auto& c : candidates_) max = std::max(max, c.first);
  double total = 0.0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((static_cast<double>(candidates_[i].first) - max) / cfg.temperature);
    total += probs[i];
  }
  if (cfg.top_p < 1.0f || cfg.min_p > 0.0f) {
    // candidates_ is sorted here, so probs[0] is the largest.
    const double floor = cfg.min_p * probs[0];
    double cumulative = 0.0;
    size_t cut = 0;
    while (cut < keep) {
      if (probs[cut] < floor) break;
      cumulative += probs[cut++];
      if (cumulative >= cfg.top_p * total) break;
    }
    keep = std::max<size_t>(cut, 1);
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  const double target = sample_uniform(cfg.seed, position) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace photon::cpu
