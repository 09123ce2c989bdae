// Log-softmax statistics of logit rows on the device, as cpu::log_sum_exp: the token log
// probabilities that scoring and generation report (spec 3.4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace photon::cuda {

// logits: [n, vocab] f32; lse: [n] double, log(sum(exp(row))) with the row's max subtracted first
// and the sum in double; targets: [n] int32 or null; logprob: [n] f32, logits[r, targets[r]] -
// lse[r] (NaN for a target outside the vocabulary). lse or logprob may be null. All on the device.
void log_softmax(const float* logits, int n, int vocab, const int32_t* targets, double* lse,
                 float* logprob, cudaStream_t stream);

}  // namespace photon::cuda
