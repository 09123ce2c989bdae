#include "backend/cuda/common.cuh"
#include "backend/cuda/logprob.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. logits: [n, vocab]; targets, lse, logprob: [n].
__global__ void __launch_bounds__(kThreads)
    log_softmax_kernel(const float* logits, int vocab, const int32_t* targets, double* lse,
                       float* logprob) {
  __shared__ float max_scratch[32];
  __shared__ double sum_scratch[32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  float max = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) max = fmaxf(max, row[i]);
  max = block_max(max, max_scratch);
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(row[i]) - max);
  sum = block_sum(sum, sum_scratch);
  if (threadIdx.x != 0) return;
  const double log_sum = max + log(sum);
  if (lse) lse[blockIdx.x] = log_sum;
  if (targets && logprob) {
    const int32_t t = targets[blockIdx.x];
    logprob[blockIdx.x] =
        t >= 0 && t < vocab ? static_cast<float>(row[t] - log_sum) : __int_as_float(0x7fc00000);
  }
}

}  // namespace

void log_softmax(const float* logits, int n, int vocab, const int32_t* targets, double* lse,
                 float* logprob, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  log_softmax_kernel<<<n, kThreads, 0, stream>>>(logits, vocab, targets, lse, logprob);
  check_launch("log_softmax_kernel");
}

}  // namespace photon::cuda
