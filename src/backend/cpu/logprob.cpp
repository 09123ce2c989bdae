#include "backend/cpu/logprob.h"

#include <cmath>

namespace photon::cpu {

double log_sum_exp(const float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}

}  // namespace photon::cpu
