// The alternatives of the token last delivered to this thread, read where the token arrives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "photon.h"

namespace photon::cli {

// photon_last_top_logprobs as (id, log-probability) pairs, the most likely first; empty for a
// session without alternatives.
inline std::vector<std::pair<int32_t, float>> last_top_logprobs() {
  int32_t ids[PHOTON_MAX_TOP_LOGPROBS];
  float values[PHOTON_MAX_TOP_LOGPROBS];
  size_t n = 0;
  std::vector<std::pair<int32_t, float>> top;
  if (photon_last_top_logprobs(ids, values, PHOTON_MAX_TOP_LOGPROBS, &n) != PHOTON_OK) return top;
  for (size_t i = 0; i < n && i < PHOTON_MAX_TOP_LOGPROBS; ++i) top.emplace_back(ids[i], values[i]);
  return top;
}

}  // namespace photon::cli
