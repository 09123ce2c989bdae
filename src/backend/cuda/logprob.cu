#include "backend/cuda/common.cuh"
#include "backend/cuda/logprob.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. logits: [n, vocab]; targets, logprob: [n].
__global__ void __launch_bounds__(kThreads)
    log_softmax_kernel(const float* logits, int vocab, const int32_t* targets, float* logprob) {
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
  logprob[blockIdx.x] = static_cast<float>(row[targets[blockIdx.x]] - log_sum);
}

}  // namespace

void log_softmax(const float* logits, int n, int vocab, const int32_t* targets, float* logprob,
                 cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  log_softmax_kernel<<<n, kThreads, 0, stream>>>(logits, vocab, targets, logprob);
  check_launch("log_softmax_kernel");
}

}  // namespace photon::cuda
