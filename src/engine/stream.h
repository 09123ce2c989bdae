// What a session delivers, and the rules of delivery: tokens are delivered strictly in position
// order; tokens sampled ahead of delivery (RecGen's sibling windows) wait here; a token the pull
// API could not hand over (the caller's buffer was too small) is held until it is taken; and a
// session whose caches a failed step may have left half-updated is unusable from then on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/sampling.h"
#include "photon.h"
#include "tokenizer/tokenizer.h"

namespace photon {

// A token as it is delivered: its id, its text piece, its log-probability and the alternatives
// its session's sampler asked for (photon_session_options_set_top_logprobs).
struct DeliveredToken {
  int32_t token;
  std::string_view piece;
  float logprob;
  std::span<const TokenLogprob> top;
};

struct Stream {
  struct Sampled {
    int32_t token;
    float logprob;
    std::vector<TokenLogprob> top;  // the alternatives, when the sampler asks for them
  };
  struct Held {
    int32_t token;
    float logprob;
    std::string piece;
    std::vector<TokenLogprob> top;
  };

  // The longest stop string photon_session_options_add_stop_string accepts; `recent` always keeps
  // at least this many bytes of the text before a new piece, all that such a string can span.
  static constexpr size_t kMaxStopString = 4096;

  std::map<int64_t, Sampled> ahead;  // sampled at these positions, not delivered yet
  Utf8Stream utf8;
  std::string recent;  // the tail of the delivered text, for stop strings
  std::optional<Held> held;
  photon_stop_reason stop_reason = PHOTON_STOP_NONE;
  // The last pull returned the token that completed a stop string: the next pull returns none.
  bool string_stop_owed = false;
  photon_status broken = PHOTON_OK;

  // Throws the status of the failure that left the session unusable.
  void require_usable(std::string_view who) const {
    if (broken != PHOTON_OK)
      fail(broken, std::string(who) + ": an earlier call failed inside this session (" +
                       photon_status_name(broken) + ") and left it unusable; free it");
  }
  // A held token must be taken before anything else happens to the stream.
  void require_nothing_held(std::string_view who) const {
    if (held)
      fail(PHOTON_ERR_INVALID_ARGUMENT,
           std::string(who) +
               ": a token from photon_session_next_token did not fit its buffer; fetch it first");
  }
};

}  // namespace photon
