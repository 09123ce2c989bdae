#include "backend/cpu/sample.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace photon::cpu {

namespace {

using Candidate = Sampler::Candidate;

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;  // ties keep the lowest id
  return best;
}

// The ranking of photon.h (descending logit, ties by ascending id) as one integer, ascending: the
// logit's bits mapped to an unsigned order (high half, inverted so that larger logits come
// first), then the id.
uint64_t rank_key(float logit, int32_t id) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);  // -0 as +0: they tie
  const uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return static_cast<uint64_t>(~ascending) << 32 | static_cast<uint32_t>(id);
}

bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.key < b.key;
}

// Below this many candidates a range is sorted rather than partitioned further.
constexpr size_t kSortDirectly = 64;

// Reorders `c` so that its first n entries, returned, are the highest ranked of `c` (in no
// particular order) and their weights sum to at least `mass` (all of `c` when no prefix does).
// A quickselect on mass: expected linear time, so top-p sorts only the tokens it may keep.
size_t likeliest_with_mass(std::span<Candidate> c, double mass) {
  size_t lo = 0, hi = c.size();
  // [0, lo) ranks above [lo, hi), which ranks above [hi, end); `mass` is what [lo, hi) must add.
  while (hi - lo > kSortDirectly) {
    const size_t mid = lo + (hi - lo) / 2;
    // Median of three as the pivot, moved to hi - 1.
    if (ranks_before(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    if (ranks_before(c[hi - 1], c[lo])) std::swap(c[hi - 1], c[lo]);
    if (ranks_before(c[mid], c[hi - 1])) std::swap(c[mid], c[hi - 1]);
    const Candidate pivot = c[hi - 1];
    const auto split =
        std::partition(c.begin() + static_cast<long>(lo), c.begin() + static_cast<long>(hi - 1),
                       [&](const Candidate& x) { return ranks_before(x, pivot); });
    const size_t at = static_cast<size_t>(split - c.begin());
    std::swap(c[at], c[hi - 1]);
    double above = 0.0;
    for (size_t i = lo; i < at; ++i) above += c[i].weight;
    if (above >= mass) {
      hi = at;
      continue;
    }
    mass -= above;
    if (c[at].weight >= mass) return at + 1;
    mass -= c[at].weight;
    lo = at + 1;
  }
  return hi;
}

}  // namespace

int32_t Sampler::sample(const SamplerConfig& cfg, float* logits, int vocab, int64_t position,
                        std::span<const int32_t> recent) {
  for (const LogitBias& entry : cfg.logit_bias) logits[entry.token] += entry.bias;
  if (cfg.penalized())
    for (const auto& [token, count] : penalty_counts(cfg, recent))
      logits[token] = penalized_logit(cfg, logits[token], count);
  if (cfg.temperature <= 0.0f) return argmax(logits, vocab);

  // Candidates in id order (keyed by rank when a filter ranks them), cut by top-k, then weighed
  // at the temperature: weight = exp((logit - max) / T), so the likeliest weighs 1.
  const bool top_k = cfg.top_k > 0 && cfg.top_k < vocab;
  const bool ranked = top_k || cfg.top_p < 1.0f || cfg.min_p > 0.0f;
  candidates_.resize(static_cast<size_t>(vocab));
  if (ranked)
    for (int32_t i = 0; i < vocab; ++i) candidates_[i] = {rank_key(logits[i], i), 0.0};
  else
    for (int32_t i = 0; i < vocab; ++i) candidates_[i] = {static_cast<uint64_t>(i), 0.0};
  if (top_k) {
    const auto end = candidates_.begin() + cfg.top_k;
    std::partial_sort(candidates_.begin(), end, candidates_.end(), ranks_before);
    candidates_.erase(end, candidates_.end());
  }
  float max = -INFINITY;
  for (const Candidate& c : candidates_) max = std::max(max, logits[c.id()]);
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = std::exp((static_cast<double>(logits[c.id()]) - max) / cfg.temperature);
    total += c.weight;
  }
  if (ranked) {
    // Min-p drops what weighs under min_p; top-p keeps the shortest ranked prefix that weighs
    // top_p of the total. Only the tokens either may keep are sorted: the likeliest that weigh a
    // little more than the cut needs (the sums run in another order than the cut's).
    const double floor = cfg.min_p;
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [&](const Candidate& c) { return c.weight < floor; }),
                      candidates_.end());
    size_t sorted = candidates_.size();
    if (cfg.top_p < 1.0f)
      sorted = likeliest_with_mass(candidates_, cfg.top_p * total * (1.0 + 1e-9));
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<long>(sorted), ranks_before);
    double cumulative = 0.0;
    size_t cut = 0;
    while (cut < sorted) {
      cumulative += candidates_[cut++].weight;
      if (cfg.top_p < 1.0f && cumulative >= cfg.top_p * total) break;
    }
    candidates_.resize(std::max<size_t>(cut, 1));
    total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
  }
  // The draw walks the kept candidates: ranked when a filter ranked them, else in id order.
  const double target = sample_uniform(cfg.seed, position) * total;
  double cumulative = 0.0;
  for (const Candidate& c : candidates_) {
    cumulative += c.weight;
    if (target < cumulative) return c.id();
  }
  return candidates_.back().id();
}

}  // namespace photon::cpu
