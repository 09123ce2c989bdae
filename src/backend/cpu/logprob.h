// Numerically stable log-softmax helpers over one row of logits.
#pragma once

namespace photon::cpu {

// log(sum(exp(x))) with the max subtracted first.
double log_sum_exp(const float* x, int n);

}  // namespace photon::cpu
