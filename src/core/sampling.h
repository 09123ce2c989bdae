// Sampling settings and the counter-based random draw that every backend's sampler shares: the
// draw for a position depends only on (seed, position), so RecGen's parallel windows, batched
// sessions and restored sessions all sample the same tokens. The filters themselves are
// documented in photon.h and implemented by each backend (backend/cpu/sample.cpp is the
// reference).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace photon {

// One of a position's most likely ids and its log-probability under the unmodified logits.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

// The most alternatives a token may report (PHOTON_MAX_TOP_LOGPROBS).
constexpr int32_t kMaxTopLogprobs = 20;

// A logit bias entry: the id and what is added to its logit.
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
  bool operator==(const LogitBias&) const = default;
};

struct SamplerConfig {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t repetition_last_n = 64;  // the penalty window of all three penalties
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<LogitBias> logit_bias;  // ascending, distinct ids
  int32_t top_logprobs = 0;           // alternatives reported with each token, 0..kMaxTopLogprobs
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;

  // Whether a penalty applies, so that each token depends on the ones sampled before it.
  bool penalized() const {
    return (repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f) &&
           repetition_last_n > 0;
  }
  // Settings a session state of format version 3 cannot hold.
  bool beyond_format_3() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty() ||
           top_logprobs != 0;
  }
};

// The logit of an id that occurs `count` > 0 times in the penalty window, after the penalties of
// `config` (photon.h, "Sampling", step 1). Every backend computes exactly this.
inline float penalized_logit(const SamplerConfig& config, float logit, int32_t count) {
  const float r = config.repetition_penalty;
  const float l = logit > 0.0f ? logit / r : logit * r;
  return l - std::fma(static_cast<float>(count), config.frequency_penalty, config.presence_penalty);
}

// The ids of `history`'s last `config.repetition_last_n` tokens with their counts, ascending by id.
std::vector<std::pair<int32_t, int32_t>> penalty_counts(const SamplerConfig& config,
                                                        std::span<const int32_t> history);

// Uniform double in [0, 1) for (seed, position).
double sample_uniform(uint64_t seed, int64_t position);

}  // namespace photon
