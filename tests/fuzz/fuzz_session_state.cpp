// Fuzz target: restoring a session state (photon_session_restore) for the tiny models, then using
// what was restored. Input: one byte, then the state.
//   byte bits 0-1: the model, tiny_config(levels) with levels 0 (vanilla) .. 3
//   byte bit 2:    keep the state's integrity hash as it is; otherwise it is recomputed, so that
//                  mutations reach the verifier and the semantic checks behind the hash
// A restored session must generate, save, and restore again from what it saved into a session
// that continues exactly alike (photon.h: "A restored session continues exactly as this one would
// have"). The one failure a restored state may give is PHOTON_ERR_NOT_FINITE: its integrity hash is
// recomputed here, so its caches may hold any floats, and values no model would compute (a key of
// 1e38) overflow the logits; the engine must say so, not produce tokens from them.
#include <cstring>
#include <optional>

#include "damage_cases.h"
#include "fuzz_common.h"

namespace {

using photon::fuzz::no_bug;
using photon::fuzz::require;

struct Tokens {
  std::vector<int32_t> ids;
};

int collect(void* user, int32_t token, const char*, size_t, float) {
  static_cast<Tokens*>(user)->ids.push_back(token);
  return 0;
}

std::vector<uint8_t> save(photon_session* session) {
  size_t size = 0;
  const photon_status status =
      no_bug(photon_session_save(session, nullptr, 0, &size), "photon_session_save");
  require(status == PHOTON_ERR_BUFFER_TOO_SMALL,
          std::string("sizing the save of a restored session: ") + photon_status_name(status) +
              ": " + photon_last_error());
  std::vector<uint8_t> state(size);
  require(photon_session_save(session, state.data(), state.size(), &size) == PHOTON_OK &&
              size == state.size(),
          std::string("saving a restored session failed: ") + photon_last_error());
  return state;
}

// The tokens the session generates, or nothing when its values overflow (above).
std::optional<Tokens> continuation(const photon_model* model, photon_session* session) {
  // A session saved before its prefill holds no tokens yet: it continues after a BOS.
  if (photon_session_position(session) == 0) {
    const int32_t bos = photon_model_bos(model);
    require(photon_session_prefill(session, &bos, 1) == PHOTON_OK,
            std::string("a restored empty session cannot prefill: ") + photon_last_error());
  }
  Tokens out;
  const photon_status status = no_bug(photon_session_generate(session, 4, collect, &out, nullptr),
                                      "photon_session_generate");
  if (status == PHOTON_ERR_NOT_FINITE) return std::nullopt;
  require(status == PHOTON_OK,
          std::string("a restored session cannot generate: ") + photon_last_error());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  photon_model* model = photon::fuzz::tiny_model(data[0] & 3);
  std::vector<uint8_t> state(data + 1, data + size);
  if (!(data[0] & 4) && state.size() >= 4) {
    uint32_t body = 0;
    std::memcpy(&body, state.data(), 4);
    if (uint64_t{4} + body + 8 <= state.size()) {
      std::vector<uint8_t> framed(state.begin(), state.begin() + 4 + body + 8);
      photon::hardening::rehash_state(framed);
      std::copy(framed.begin(), framed.end(), state.begin());
    }
  }
  photon_session* restored = nullptr;
  if (no_bug(photon_session_restore(model, state.data(), state.size(), &restored),
             "photon_session_restore") != PHOTON_OK) {
    require(restored == nullptr, "a failed restore wrote its out-parameter");
    return 0;
  }
  const std::vector<uint8_t> saved = save(restored);
  photon_session* again = nullptr;
  require(photon_session_restore(model, saved.data(), saved.size(), &again) == PHOTON_OK,
          std::string("a restored session's own state is refused: ") + photon_last_error());
  const std::optional<Tokens> first = continuation(model, restored),
                              second = continuation(model, again);
  require(first.has_value() == second.has_value() && (!first || first->ids == second->ids),
          "a saved and restored session continues differently");
  photon_session_free(again);
  photon_session_free(restored);
  return 0;
}
