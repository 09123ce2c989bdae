// The engine's prefix cache (photon_engine_options_set_prefix_cache): saved sessions of prompts
// the engine has read, each under the settings its prefill depended on, so that a request whose
// prompt begins with one starts from it. At most `capacity` bytes of saves; the least recently
// used go first. Used by the stepping thread only.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "engine/runner.h"

namespace photon::serving {

class PrefixCache {
 public:
  // What a prefill depends on besides the tokens (the sampler does not enter it).
  struct Key {
    Mode mode = Mode::HierGen;
    int context = 0;
    DType kv_type = DType::F32;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    std::vector<int32_t> tokens;  // the prompt read, from the session's start
    std::vector<uint8_t> state;   // the session once it had read them (photon_session_save's)
  };

  explicit PrefixCache(uint64_t capacity) : capacity_(capacity) {}

  bool enabled() const { return capacity_ > 0; }
  uint64_t bytes() const { return bytes_; }

  // Whether a session of this key that read a prompt reads more of it incrementally: RecGen keeps
  // no encoder caches below its top level and encodes an extended prompt whole again, so its
  // saves serve only the same prompt.
  static bool extends(const Key& key) { return key.mode != Mode::RecGen; }

  // The entry under `key` with the longest tokens that begin `prompt` (all of it at most; all of
  // it exactly where the key does not extend), made the most recently used; null when none.
  const Entry* find(const Key& key, std::span<const int32_t> prompt);
  // Keeps `state`, the session that read `tokens` (replacing an entry of the same key and
  // tokens), then drops the least recently used entries while over the capacity. A state alone
  // larger than the capacity is not kept.
  void insert(const Key& key, std::vector<int32_t> tokens, std::vector<uint8_t> state);

 private:
  static uint64_t size_of(const Entry& e) {
    return e.state.size() + e.tokens.size() * sizeof(int32_t);
  }

  uint64_t capacity_;
  uint64_t bytes_ = 0;
  std::list<Entry> entries_;  // the most recently used first
};

}  // namespace photon::serving
