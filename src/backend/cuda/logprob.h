// Log-softmax statistics of logit rows on the device, as cpu::log_sum_exp: the token log
// probabilities that scoring and generation report (spec 3.4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace photon::cuda {

// logits: [n, vocab] f32; targets: [n] int32 in [0, vocab); logprob: [n] f32, logits[r,
// targets[r]] - log(sum(exp(row r))), the row's max subtracted first and the sum in double. All on
// the device.
void log_softmax(const float* logits, int n, int vocab, const int32_t* targets, float* logprob,
                 cudaStream_t stream);

}  // namespace photon::cuda
