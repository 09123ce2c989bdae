// The decoding loop shared by every mode and by batches of sessions: catch each session's caches
// up, sample every ready lane of every session with one LM-head GEMM, feed the tokens back, and
// deliver tokens strictly in position order while applying the stop rules.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/session.h"

namespace photon {

// Receives each delivered token; returning false stops that session.
using TokenSink = std::function<bool(int32_t token, std::string_view piece, float logprob)>;

// photon_session_generate(_batch): up to max_tokens (>= 0) more tokens for each session (of one
// model, each once), decoded together; sinks[i] (may be empty) receives session i's tokens.
// Returns how many each delivered; each stream's stop_reason says why it stopped. `batch` words
// the messages for a batch ("session i ...").
std::vector<int32_t> generate(std::span<Session* const> sessions, int32_t max_tokens,
                              std::span<const TokenSink> sinks, std::string_view who, bool batch);

// photon_session_next_token: the session's next token, decoded unless one is held already. It
// stays held (and is returned again) until take_next(); null when the session stopped (its
// stream's stop_reason says why).
const Stream::Held* next_token(Session& session, std::string_view who);
inline void take_next(Session& session) {
  session.stream.held.reset();
}

}  // namespace photon
