// The decoding loop shared by every mode: sample the session's ready lanes, deliver tokens in
// order, apply the stop rules, and leave the session exactly at the delivered history.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "engine/sampler.h"
#include "engine/session.h"
#include "photon.h"
#include "tokenizer/tokenizer.h"

namespace photon {

// Receives each delivered token; returning false stops generation.
using TokenSink = std::function<bool(int32_t token, std::string_view piece, float logprob)>;

struct GenerateResult {
  photon_stop_reason reason = PHOTON_STOP_NONE;
  int32_t generated = 0;
};

GenerateResult generate(Session& session, const SamplerConfig& config, Utf8Stream& utf8,
                        int32_t max_tokens, const TokenSink& sink);

}  // namespace photon
