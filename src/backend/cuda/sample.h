// Token sampling on the device with the CPU sampler's semantics (backend/cpu/sample.h): logit bias,
// penalties, greedy, temperature, top-k, top-p, min-p, and the counter-based uniform
// sample_uniform(seed, position), so that the same logits give the same token on either side.
//
// Candidate order is exact (logit descending, ties by lower id, -0 == +0). The one difference is
// the order of the double-precision sums of probabilities (a tree here, a loop on the CPU): a
// token can differ only when u * total falls within a few ulps of a cumulative boundary.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/sampling.h"

namespace photon::cuda {

// One row's settings, copied to the device as is.
struct SampleParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t recent_len = 0;  // leading entries of the row's recent window the penalties look at
  int32_t bias_begin = 0;  // the row's entries of the logit bias table
  int32_t bias_count = 0;
  uint64_t seed = 0;
  int64_t position = 0;
};

// The settings of a SamplerConfig for `position`, whose session has `history` tokens; the row's
// recent window must then hold the last recent_len of them, and the logit bias table its
// config.logit_bias from entry bias_begin on.
inline SampleParams make_sample_params(const SamplerConfig& config, int64_t position,
                                       size_t history, int32_t bias_begin) {
  SampleParams p;
  p.temperature = config.temperature;
  p.top_k = config.top_k;
  p.top_p = config.top_p;
  p.min_p = config.min_p;
  p.repetition_penalty = config.repetition_penalty;
  p.presence_penalty = config.presence_penalty;
  p.frequency_penalty = config.frequency_penalty;
  p.bias_begin = bias_begin;
  p.bias_count = static_cast<int32_t>(config.logit_bias.size());
  p.recent_len = config.penalized() ? static_cast<int32_t>(std::min<size_t>(
                                          history, static_cast<size_t>(config.repetition_last_n)))
                                    : 0;
  p.seed = config.seed;
  p.position = position;
  return p;
}

// Device scratch of sample_launch for n rows.
size_t sample_workspace_bytes(int n, int vocab);
// Whether any of these rows needs that scratch: rows that bias or penalise logits or rank
// candidates (top-k, top-p, min-p) do; greedy and plain-temperature rows read their logits in
// place, so a batch of them runs in one launch of any size without scratch.
bool sample_needs_workspace(std::span<const SampleParams> params, int vocab);

// logits: [n, vocab] f32 (left unchanged); params: [n]; recent: [n, recent_stride] int32 (may be
// null when no row is penalised); bias: the logit bias table that params index (may be null when
// no row biases); workspace: sample_workspace_bytes(n, vocab), or null when
// sample_needs_workspace is false; tokens: [n] int32 out.
// All on the device.
void sample_launch(const float* logits, int n, int vocab, const SampleParams* params,
                   const int32_t* recent, int recent_stride, const LogitBias* bias, void* workspace,
                   int32_t* tokens, cudaStream_t stream);

}  // namespace photon::cuda
