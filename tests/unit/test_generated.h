// What a generate call streamed, gathered by a photon_token_callback (shared by the engine tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace photon::testing {

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// A photon_token_callback: appends to the Generated that `user` points to and never stops.
inline int collect(void* user, int32_t token, const char*, size_t, float logprob) {
  auto* out = static_cast<Generated*>(user);
  out->tokens.push_back(token);
  out->logprobs.push_back(logprob);
  return 0;
}

}  // namespace photon::testing
