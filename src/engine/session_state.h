// Saving and restoring sessions (schemas/session.fbs): the exact caches, history, sampler and
// stream state, so that a restored session continues exactly as the original would have.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/decode.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace photon {

// Newest session-state format version this build reads and the one it writes.
constexpr uint32_t kSessionFormatVersion = 1;

struct RestoredSession {
  std::unique_ptr<Session> session;
  SamplerConfig sampler;
  DecodeState decode;
};

class SessionCodec {
 public:
  // The session must hold no tokens sampled ahead (DecodeState::discard_ahead first).
  static std::vector<uint8_t> save(const Session& session, const SamplerConfig& sampler,
                                   const DecodeState& decode);
  // Validates everything before building anything. Throws Error with PHOTON_ERR_TRUNCATED,
  // _BAD_IDENTIFIER, _CORRUPT, _UNSUPPORTED_VERSION or _WRONG_MODEL.
  static RestoredSession restore(const Model& model, std::span<const uint8_t> blob);
};

}  // namespace photon
