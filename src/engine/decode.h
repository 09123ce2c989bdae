// The decoding loop shared by every mode and by batches of sessions: sync each session's caches,
// sample every ready lane of every session with one LM-head GEMM, feed the tokens back, and
// deliver tokens strictly in position order while applying the stop rules.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "engine/sampler.h"
#include "engine/session.h"
#include "photon.h"
#include "tokenizer/tokenizer.h"

namespace photon {

// Receives each delivered token; returning false stops that session.
using TokenSink = std::function<bool(int32_t token, std::string_view piece, float logprob)>;

// What a session keeps between decoding calls: tokens sampled ahead of delivery (RecGen's sibling
// windows), the UTF-8 stream and the recent text that stop strings are matched against.
struct DecodeState {
  struct Sampled {
    int32_t token;
    float logprob;
  };
  std::map<int64_t, Sampled> ready;
  Utf8Stream utf8;
  std::string recent;  // the tail of the delivered text

  // Forgets tokens sampled ahead and rolls the session back to its history (before a prefill,
  // save or sampler change: the draws are keyed by position, so they will be sampled again alike).
  void discard_ahead(Session& session) {
    ready.clear();
    session.rollback();
  }
};

struct DecodeTask {
  Session* session = nullptr;
  DecodeState* state = nullptr;
  const SamplerConfig* config = nullptr;
  int64_t limit = 0;        // no token at or beyond this position (the call's budget)
  int32_t max_deliver = 0;  // return after delivering this many (the pull API asks for 1)
  TokenSink sink;
  // results
  int32_t delivered = 0;
  photon_stop_reason reason = PHOTON_STOP_NONE;  // stays NONE if the call ended by max_deliver
};

// Runs every task until it stops or has delivered max_deliver tokens. The sessions must share one
// model and be distinct.
void decode(std::span<DecodeTask> tasks);

}  // namespace photon
