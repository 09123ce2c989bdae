// The hand-made corpus of damaged model files and session states: for every field of
// schemas/model.fbs, schemas/session.fbs and schemas/session_v2.fbs (the session states of format
// versions 1 and 2) at least one damaged value, with the status and the part of the message that
// the reader must answer it with. Used by test_damaged.cpp, and written
// into the fuzzers' seed corpora by tests/fuzz/make_seeds.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "photon.h"

namespace photon::hardening {

struct DamageCase {
  std::string field;   // "Table.field" as in the schema, or "file.<part>" for the framing
  std::string damage;  // what was done to it
  std::vector<uint8_t> bytes;
  photon_status status;  // PHOTON_OK: the field holds no invariant a reader could check
  std::string message;   // a part of the error message
  int model = 0;         // the model a state is restored with (StateModels)
};

// Damaged copies of two valid model files, a PHOTON one with two levels and a vanilla one, both
// with a real sentencepiece tokenizer of exactly vocab_size pieces.
std::vector<DamageCase> damaged_model_files(const std::vector<uint8_t>& photon_file,
                                            const std::vector<uint8_t>& vanilla_file);

enum StateModel { kPhotonModel = 0, kVanillaModel = 1 };

// The states the cases damage: HierGen and RecGen of the two-level PHOTON model, and vanilla,
// each holding at least one token.
struct StateBases {
  std::vector<uint8_t> hiergen, recgen, vanilla;
};
// Saved by this build from sessions of tiny_config(2) (B_1 = 2, B_2 = 4: histories that leave
// every level with pending children, an open window and a filled top-level cache) and of
// tiny_config(0). Throws std::runtime_error if a call fails.
StateBases base_states(photon_model* photon, photon_model* vanilla);
// The same sessions saved by the release of format versions 1 and 2 (tests/states/saved/).
StateBases released_bases();

// Damaged copies of `bases` (every field of schemas/session.fbs) and of released_bases() (every
// field of schemas/session_v2.fbs, the cases' fields named "v2.Table.field").
std::vector<DamageCase> damaged_session_states(const StateBases& bases);

// A state rebuilt through the object API of its version without any change, framed and hashed
// again.
std::vector<uint8_t> rebuilt_state(const std::vector<uint8_t>& state);
// A model file rebuilt through the object API without any change.
std::vector<uint8_t> rebuilt_model_file(const std::vector<uint8_t>& file);

// The framing of session states: the size-prefixed FlatBuffer, then its 8-byte integrity hash.
void rehash_state(std::vector<uint8_t>& state);

}  // namespace photon::hardening
