#include "backend/cpu/logprob.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace photon::cpu {

double log_sum_exp(const float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}

void top_logprobs(const float* x, int n, int k, std::vector<TokenLogprob>& out) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  const double lse = log_sum_exp(x, n);
  out.resize(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) out[i] = {ids[i], static_cast<float>(x[ids[i]] - lse)};
}

}  // namespace photon::cpu
