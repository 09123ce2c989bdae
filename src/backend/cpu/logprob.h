// Numerically stable log-softmax helpers over one row of logits.
#pragma once

#include <vector>

#include "core/sampling.h"

namespace photon::cpu {

// log(sum(exp(x))) with the max subtracted first.
double log_sum_exp(const float* x, int n);

// The k (<= n) largest of x as (index, x - log_sum_exp(x)), largest first, the lower index first
// on ties. Also the host's reference of every backend's alternatives (Backend::sample).
void top_logprobs(const float* x, int n, int k, std::vector<TokenLogprob>& out);

}  // namespace photon::cpu
