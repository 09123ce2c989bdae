// A conversation as bytes, the same in every store (a file of the directory store, a value in
// Redis): little-endian "PHCONV01", u64 version, u32 flags (bit 0: has text), u64 n + text,
// u64 n + n int32 tokens, u64 n + state bytes, u64 FNV-1a of everything before. The checksum
// catches damage to the record; the state inside also validates itself when it is restored.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "serve/conversation_store.h"

namespace photon::serve {

// The record of `conversation` stored as `version`.
std::vector<uint8_t> encode_conversation(uint64_t version, const Conversation& conversation);
// The conversation in `record` (its version from the record), or none when the record is damaged
// or not one.
std::optional<Conversation> decode_conversation(const std::vector<uint8_t>& record);
// The version in a record's header (the first 16 bytes), or none when they are not a record's.
std::optional<uint64_t> record_version(const uint8_t* head, size_t size);

}  // namespace photon::serve
