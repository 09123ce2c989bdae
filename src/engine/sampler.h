// Token sampling (greedy, temperature, top-k, top-p, min-p, repetition penalty) with a
// counter-based random generator: the draw for a position depends only on (seed, position), so
// RecGen's parallel windows, batched sessions and restored sessions all sample the same tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace photon {

struct SamplerConfig {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t repetition_last_n = 64;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;

  bool penalized() const { return repetition_penalty != 1.0f && repetition_last_n > 0; }
};

// Uniform double in [0, 1) for (seed, position).
double sample_uniform(uint64_t seed, int64_t position);

class Sampler {
 public:
  // Picks the token for `position` from raw logits [vocab] (modified in place). `recent` holds the
  // history the repetition penalty looks at.
  int32_t sample(const SamplerConfig& config, float* logits, int vocab, int64_t position,
                 std::span<const int32_t> recent);

 private:
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace photon
