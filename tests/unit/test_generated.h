// What the engine tests share about sessions: what a generate call streamed (gathered by token
// callbacks), batched prefills, and saved states.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "photon.h"

namespace photon::testing {

// A token's alternatives: (id, log-probability), most likely first.
using Alternatives = std::vector<std::pair<int32_t, float>>;

// photon_last_top_logprobs: the alternatives of the token last delivered to this thread.
inline Alternatives last_top() {
  int32_t ids[PHOTON_MAX_TOP_LOGPROBS];
  float logprobs[PHOTON_MAX_TOP_LOGPROBS];
  size_t n = 0;
  EXPECT_EQ(photon_last_top_logprobs(ids, logprobs, PHOTON_MAX_TOP_LOGPROBS, &n), PHOTON_OK);
  Alternatives out;
  for (size_t i = 0; i < n && i < PHOTON_MAX_TOP_LOGPROBS; ++i)
    out.emplace_back(ids[i], logprobs[i]);
  return out;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<Alternatives> top;  // each token's alternatives (empty without them)
};

// A photon_token_callback: appends to the Generated that `user` points to and never stops.
inline int collect(void* user, int32_t token, const char*, size_t, float logprob) {
  auto* out = static_cast<Generated*>(user);
  out->tokens.push_back(token);
  out->logprobs.push_back(logprob);
  out->top.push_back(last_top());
  return 0;
}

// A photon_batch_callback: appends to element session_index of the std::vector<Generated> that
// `user` points to and never stops.
inline int collect_batch(void* user, size_t session_index, int32_t token, const char* piece,
                         size_t piece_len, float logprob) {
  auto& runs = *static_cast<std::vector<Generated>*>(user);
  return collect(&runs[session_index], token, piece, piece_len, logprob);
}

// photon_session_prefill_batch of prompts[i] into sessions[i].
inline photon_status prefill_batch(const std::vector<photon_session*>& sessions,
                                   const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<const int32_t*> tokens;
  std::vector<size_t> lengths;
  for (const std::vector<int32_t>& p : prompts) {
    tokens.push_back(p.data());
    lengths.push_back(p.size());
  }
  return photon_session_prefill_batch(sessions.data(), sessions.size(), tokens.data(),
                                      lengths.data());
}

// The session's saved state, asked for its size first.
inline std::vector<uint8_t> save_state(photon_session* s) {
  size_t size = 0;
  EXPECT_EQ(photon_session_save(s, nullptr, 0, &size), PHOTON_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> blob(size);
  EXPECT_EQ(photon_session_save(s, blob.data(), blob.size(), &size), PHOTON_OK)
      << photon_last_error();
  EXPECT_EQ(size, blob.size());
  return blob;
}

}  // namespace photon::testing
