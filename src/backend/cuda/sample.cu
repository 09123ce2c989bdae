#include <algorithm>
#include <climits>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sample.h"
#include "core/error.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 512;

__host__ __device__ inline size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

int power_of_two_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Per row: the penalised logits [vocab] f32, sort keys [pow2(vocab)] u64, probabilities and then
// their running sums [vocab] f64.
size_t row_bytes(int vocab) {
  return aligned(vocab * sizeof(float)) + aligned(power_of_two_at_least(vocab) * sizeof(uint64_t)) +
         aligned(vocab * sizeof(double));
}

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// photon::sample_uniform, bit for bit.
__device__ inline double sample_uniform(uint64_t seed, int64_t position) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// A row that biases or penalises logits edits a copy of them; one that ranks candidates (top-k,
// top-p, min-p) sorts keys and stores running sums. Both live in the row's workspace; greedy and
// plain-temperature rows read the logits in place and need none.
__host__ __device__ inline bool penalized(const SampleParams& p) {
  return p.recent_len > 0;
}
__host__ __device__ inline bool edited(const SampleParams& p) {
  return penalized(p) || p.bias_count > 0;
}

// photon::penalized_logit (core/sampling.h), bit for bit.
__device__ inline float penalized_logit(const SampleParams& p, float logit, int count) {
  const float l = logit > 0.0f ? logit / p.repetition_penalty : logit * p.repetition_penalty;
  return l - fmaf(static_cast<float>(count), p.frequency_penalty, p.presence_penalty);
}
__host__ __device__ inline bool ranked(const SampleParams& p, int vocab) {
  return p.temperature > 0.0f &&
         ((p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f || p.min_p > 0.0f);
}

// Ascending keys order logits descending; -0 and +0 get one key, as they compare equal.
__device__ inline uint32_t descending_key(float value) {
  const uint32_t bits = __float_as_uint(value == 0.0f ? 0.0f : value);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending;
}

__device__ inline void keep_better(float& best, int& index, float other, int other_index) {
  if (other > best || (other == best && other_index < index)) {
    best = other;
    index = other_index;
  }
}

__device__ inline void warp_argmax(float& best, int& index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, best, offset);
    const int other_index = __shfl_xor_sync(kFullMask, index, offset);
    keep_better(best, index, other, other_index);
  }
}

// The lowest id among the largest values (the CPU's argmax).
__device__ int block_argmax(const float* values, int n, float* value_scratch, int* index_scratch) {
  float best = -INFINITY;
  int index = INT_MAX;
  for (int i = threadIdx.x; i < n; i += kThreads) keep_better(best, index, values[i], i);
  warp_argmax(best, index);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    value_scratch[warp] = best;
    index_scratch[warp] = index;
  }
  __syncthreads();
  best = lane < kThreads / 32 ? value_scratch[lane] : -INFINITY;
  index = lane < kThreads / 32 ? index_scratch[lane] : INT_MAX;
  warp_argmax(best, index);
  return index;
}

// The smallest key T with at least k values whose key is <= T: the k-th best value's key.
__device__ uint32_t kth_key(const float* values, int n, int k, int* scratch) {
  uint32_t lo = 0, hi = 0xffffffffu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    int count = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) count += descending_key(values[i]) <= mid;
    if (block_sum(count, scratch) >= k)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The smallest key T whose values (key <= T, the likeliest first) weigh at least `mass`, by the
// weights probs (indexed like values), or the largest key when none does.
__device__ uint32_t mass_key(const float* values, const double* probs, int n, double mass,
                             double* scratch) {
  uint32_t lo = 0, hi = 0xffffffffu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += kThreads)
      if (descending_key(values[i]) <= mid) sum += probs[i];
    if (block_sum(sum, scratch) >= mass)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Ascending bitonic sort of n (a power of two) keys in global memory by the whole block.
__device__ void bitonic_sort(uint64_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < n / 2; t += kThreads) {
        const int i = 2 * stride * (t / stride) + t % stride;  // bit `stride` of i is clear
        const uint64_t a = keys[i], b = keys[i + stride];
        if ((a > b) == ((i & size) == 0)) {
          keys[i] = b;
          keys[i + stride] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Sum of `value` over the threads before this one, in thread order.
__device__ double block_exclusive_scan(double value, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double inclusive = value;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  double exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
  if (lane == 0) exclusive = 0.0;
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  double before = 0.0;
  for (int w = 0; w < warp; ++w) before += scratch[w];
  return before + exclusive;
}

// One block per row; mirrors Sampler::sample step by step.
// logits: [n, vocab]; params: [n]; recent: [n, recent_stride]; bias: the rows' logit bias
// entries; tokens: [n].
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int vocab, const SampleParams* params, const int32_t* recent,
                  int recent_stride, const LogitBias* bias, char* workspace, size_t stride_bytes,
                  int padded_vocab, int32_t* tokens) {
  __shared__ float float_scratch[32];
  __shared__ int int_scratch[32];
  __shared__ double double_scratch[32];
  __shared__ int compacted;
  __shared__ double total;
  const int row = blockIdx.x, tid = threadIdx.x;
  const SampleParams p = params[row];
  const float* logit_row = logits + static_cast<size_t>(row) * vocab;
  const float* values = logit_row;
  // The row's workspace: null for rows that need none (sample_needs_workspace).
  char* base = edited(p) || ranked(p, vocab) ? workspace + row * stride_bytes : nullptr;
  if (edited(p)) {
    float* copy = reinterpret_cast<float*>(base);
    for (int i = tid; i < vocab; i += kThreads) copy[i] = logit_row[i];
    __syncthreads();
    // The bias's ids are distinct, so each entry has its logit to itself.
    for (int b = tid; b < p.bias_count; b += kThreads) {
      const LogitBias entry = bias[p.bias_begin + b];
      copy[entry.token] += entry.bias;
    }
    __syncthreads();
    // Penalties once per distinct token: its first occurrence in the window counts them all.
    const int32_t* window = recent + static_cast<size_t>(row) * recent_stride;
    for (int t = tid; t < p.recent_len; t += kThreads) {
      const int32_t token = window[t];
      bool first = token >= 0 && token < vocab;
      for (int u = 0; u < t && first; ++u) first = window[u] != token;
      if (first) {
        int count = 1;
        for (int u = t + 1; u < p.recent_len; ++u) count += window[u] == token;
        copy[token] = penalized_logit(p, copy[token], count);
      }
    }
    __syncthreads();
    values = copy;
  }
  if (p.temperature <= 0.0f) {
    const int best = block_argmax(values, vocab, float_scratch, int_scratch);
    if (tid == 0) tokens[row] = best;
    return;
  }
  const double temperature = p.temperature;

  if (!ranked(p, vocab)) {
    // The vocabulary in id order. The ranked path below stores running sums; here each thread
    // recomputes its chunk's instead (the same additions in the same order: the same bits).
    float m = -INFINITY;
    for (int i = tid; i < vocab; i += kThreads) m = fmaxf(m, values[i]);
    const float max_logit = block_max(m, float_scratch);
    auto prob = [&](int c) {
      return exp((static_cast<double>(values[c]) - max_logit) / temperature);
    };
    const int per_thread = (vocab + kThreads - 1) / kThreads;
    const int c0 = min(vocab, tid * per_thread), c1 = min(vocab, c0 + per_thread);
    double local = 0.0;
    for (int c = c0; c < c1; ++c) local += prob(c);
    const double running = block_exclusive_scan(local, double_scratch);
    double sum = running;
    for (int c = c0; c < c1; ++c) sum += prob(c);
    if (c0 < c1 && c1 == vocab) total = sum;  // the running sum at the last id
    __syncthreads();
    const double target = sample_uniform(p.seed, p.position) * total;
    int chosen = INT_MAX;
    sum = running;
    for (int c = c0; c < c1; ++c) {
      sum += prob(c);
      if (target < sum) {
        chosen = c;
        break;
      }
    }
    chosen = block_min(chosen, int_scratch);
    if (tid == 0) tokens[row] = chosen == INT_MAX ? vocab - 1 : chosen;
    return;
  }

  // Candidates by descending logit (ties by id).
  uint64_t* keys = reinterpret_cast<uint64_t*>(base + aligned(vocab * sizeof(float)));
  double* sums = reinterpret_cast<double*>(reinterpret_cast<char*>(keys) +
                                           aligned(padded_vocab * sizeof(uint64_t)));
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  const bool nucleus = p.top_p < 1.0f || p.min_p > 0.0f;
  // Without top-k, a top-p cut falls among the likeliest tokens that weigh top_p of the row: only
  // those are sorted. The row's sum is then taken in another order than the sorted running sums,
  // so the set is asked for a hair more (1e-9) than the cut needs.
  const bool prefiltered = !top_k && p.top_p < 1.0f;
  double row_total = 0.0;
  uint32_t limit = 0xffffffffu;
  if (top_k) {
    limit = kth_key(values, vocab, p.top_k, int_scratch);
  } else if (prefiltered) {
    float m = -INFINITY;
    for (int i = tid; i < vocab; i += kThreads) m = fmaxf(m, values[i]);
    const float top = block_max(m, float_scratch);
    double local = 0.0;  // sums holds each id's probability until the candidates are sorted
    for (int i = tid; i < vocab; i += kThreads)
      local += sums[i] = exp((static_cast<double>(values[i]) - top) / temperature);
    row_total = block_sum(local, double_scratch);
    limit = mass_key(values, sums, vocab, p.top_p * row_total * (1.0 + 1e-9), double_scratch);
    __syncthreads();
  }
  if (tid == 0) compacted = 0;
  __syncthreads();
  for (int i = tid; i < vocab; i += kThreads) {
    const uint32_t key = descending_key(values[i]);
    if (key <= limit) keys[atomicAdd(&compacted, 1)] = (static_cast<uint64_t>(key) << 32) | i;
  }
  __syncthreads();
  const int count = compacted;
  int padded = 1;
  while (padded < count) padded <<= 1;
  for (int i = count + tid; i < padded; i += kThreads) keys[i] = ~0ull;
  __syncthreads();
  bitonic_sort(keys, padded);
  const int keep = top_k ? p.top_k : count;
  auto token_at = [&](int c) { return static_cast<int>(keys[c] & 0xffffffffu); };
  const float max_logit = values[token_at(0)];

  // Probabilities at the temperature, then running sums; each thread owns a contiguous chunk.
  const double floor =
      p.min_p * exp((static_cast<double>(values[token_at(0)]) - max_logit) / temperature);
  const int per_thread = (keep + kThreads - 1) / kThreads;
  const int c0 = min(keep, tid * per_thread), c1 = min(keep, c0 + per_thread);
  double local = 0.0;
  int below_floor = INT_MAX;
  for (int c = c0; c < c1; ++c) {
    const double prob = exp((static_cast<double>(values[token_at(c)]) - max_logit) / temperature);
    if (prob < floor && below_floor == INT_MAX) below_floor = c;
    sums[c] = prob;
    local += prob;
  }
  double running = block_exclusive_scan(local, double_scratch);
  for (int c = c0; c < c1; ++c) sums[c] = running += sums[c];
  __syncthreads();

  int end = keep;
  if (nucleus) {
    // The CPU's loop stops before the first candidate under the min-p floor, or after the first
    // whose running sum reaches top_p of the total.
    const double threshold = p.top_p * (prefiltered ? row_total : sums[keep - 1]);
    int reached = INT_MAX;
    for (int c = c0; c < c1; ++c)
      if (sums[c] >= threshold) {
        reached = c;
        break;
      }
    const int first_below = block_min(below_floor, int_scratch);
    reached = block_min(reached, int_scratch);
    const int cut = min(first_below, reached == INT_MAX ? INT_MAX : reached + 1);
    end = max(min(cut, keep), 1);
  }
  const double target = sample_uniform(p.seed, p.position) * sums[end - 1];
  int chosen = INT_MAX;
  for (int c = c0; c < min(c1, end); ++c)
    if (target < sums[c]) {
      chosen = c;
      break;
    }
  chosen = block_min(chosen, int_scratch);
  if (tid == 0) tokens[row] = token_at(chosen == INT_MAX ? end - 1 : chosen);
}

}  // namespace

size_t sample_workspace_bytes(int n, int vocab) {
  return static_cast<size_t>(n) * row_bytes(vocab);
}

bool sample_needs_workspace(std::span<const SampleParams> params, int vocab) {
  return std::any_of(params.begin(), params.end(),
                     [vocab](const SampleParams& p) { return edited(p) || ranked(p, vocab); });
}

void sample_launch(const float* logits, int n, int vocab, const SampleParams* params,
                   const int32_t* recent, int recent_stride, const LogitBias* bias, void* workspace,
                   int32_t* tokens, cudaStream_t stream) {
  if (n <= 0) return;
  check(vocab > 0, PHOTON_ERR_INTERNAL, "cuda::sample: empty vocabulary");
  sample_kernel<<<n, kThreads, 0, stream>>>(logits, vocab, params, recent, recent_stride, bias,
                                            static_cast<char*>(workspace), row_bytes(vocab),
                                            power_of_two_at_least(vocab), tokens);
  check_launch("sample_kernel");
}

}  // namespace photon::cuda
