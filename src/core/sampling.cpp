#include "core/sampling.h"

#include <algorithm>

namespace photon {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

double sample_uniform(uint64_t seed, int64_t position) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

std::vector<std::pair<int32_t, int32_t>> penalty_counts(const SamplerConfig& config,
                                                        std::span<const int32_t> history) {
  const size_t n =
      std::min(history.size(), static_cast<size_t>(std::max(config.repetition_last_n, 0)));
  std::vector<int32_t> window(history.end() - static_cast<ptrdiff_t>(n), history.end());
  std::sort(window.begin(), window.end());
  std::vector<std::pair<int32_t, int32_t>> counts;
  for (const int32_t token : window) {
    if (counts.empty() || counts.back().first != token) counts.emplace_back(token, 0);
    ++counts.back().second;
  }
  return counts;
}

}  // namespace photon
