// Sampling settings and the counter-based random draw that every backend's sampler shares: the
// draw for a position depends only on (seed, position), so RecGen's parallel windows, batched
// sessions and restored sessions all sample the same tokens. The filters themselves are
// documented in photon.h and implemented by each backend (backend/cpu/sample.cpp is the
// reference).
#pragma once

#include <cstdint>
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

}  // namespace photon
