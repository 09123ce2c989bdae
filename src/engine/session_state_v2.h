// Saved states of format versions 1 and 2 (schemas/session_v2.fbs), which kept every mode's fields
// in the root table. Their common fields read as version 3's; each mode's fields are rebuilt as
// the mode's version 3 table, so that one reader (the mode's runner) checks every version.
#pragma once

#include <span>

#include "core/config.h"
#include "engine/runner.h"
#include "session_generated.h"
#include "session_v2_generated.h"

namespace photon {

// The state of a size-prefixed buffer that the version 3 verifier accepted, verified again as
// versions 1 and 2 lay it out. Throws Error(PHOTON_ERR_CORRUPT) if that verifier rejects it.
const fb::v2::SessionState* v2_state(std::span<const uint8_t> buffer);

// The mode of a version 1 or 2 state (its `kind`).
Mode v2_mode(const fb::v2::SessionState& state);

// A version 1 or 2 state's mode fields as that mode's version 3 table. What version 3 derives
// instead of storing (the consumed count, the top-level flag) must match what it derives, else
// Error(PHOTON_ERR_CORRUPT). The state's common part was checked first (its history is present).
class V2ModeTable {
 public:
  V2ModeTable(const fb::v2::SessionState& state, Mode mode, const ModelConfig& config);
  fb::ModeState type() const { return type_; }
  const void* table() const { return table_; }

 private:
  flatbuffers::FlatBufferBuilder b_;
  fb::ModeState type_ = fb::ModeState::NONE;
  const void* table_ = nullptr;
};

}  // namespace photon
