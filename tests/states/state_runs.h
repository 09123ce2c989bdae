// Runs of generate calls, the measure of the saved-session property tests (test_state_fields.cpp):
// a session generates with photon_session_generate, call after call, each asking for what is left
// of a token budget, until the budget is delivered or a call delivers nothing (a stop that holds:
// EOS, a full context). A run records every token with its piece, log-probability and
// alternatives (photon_last_top_logprobs), and where each call began, ended and why it stopped. A
// continuation is such a run, then a prefill of known tokens (with their log-probabilities, or the
// status it failed with) and a second run: what a session does after it generated depends on more
// of its state than generating alone shows.
// photon_continue_states (continue_states.cpp) does the same in another process, for states saved
// to files, and prints each continuation as JSON.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "photon.h"

namespace photon::state_runs {

// A call: tokens [start, end) of the run, and its stop reason.
struct Call {
  int32_t start = 0, end = 0;
  photon_stop_reason reason = PHOTON_STOP_NONE;
  bool operator==(const Call&) const = default;
};

using Alternatives = std::vector<std::pair<int32_t, float>>;

struct Run {
  std::vector<int32_t> tokens;
  std::vector<std::string> pieces;
  std::vector<float> logprobs;
  std::vector<Alternatives> top;
  std::vector<Call> calls;
  bool operator==(const Run&) const = default;
};

// More calls than any run of the tests needs (a run stops at most at a few stop strings): a run
// that reaches it ends there, and the reference runs check that none does.
constexpr int kMaxCalls = 16;

inline int append(void* user, int32_t token, const char* piece, size_t length, float logprob) {
  Run& run = *static_cast<Run*>(user);
  run.tokens.push_back(token);
  run.pieces.emplace_back(piece, length);
  run.logprobs.push_back(logprob);
  int32_t ids[PHOTON_MAX_TOP_LOGPROBS];
  float values[PHOTON_MAX_TOP_LOGPROBS];
  size_t n = 0;
  photon_last_top_logprobs(ids, values, PHOTON_MAX_TOP_LOGPROBS, &n);
  Alternatives& top = run.top.emplace_back();
  for (size_t i = 0; i < std::min<size_t>(n, PHOTON_MAX_TOP_LOGPROBS); ++i)
    top.emplace_back(ids[i], values[i]);
  return 0;
}

// Calls photon_session_generate until `budget` tokens are delivered or a call delivers none.
// Returns PHOTON_OK or the first failing call's status.
inline photon_status run_calls(photon_session* s, int32_t budget, Run* run) {
  for (int c = 0; c < kMaxCalls && static_cast<int32_t>(run->tokens.size()) < budget; ++c) {
    const auto start = static_cast<int32_t>(run->tokens.size());
    int32_t generated = 0;
    const photon_status status =
        photon_session_generate(s, budget - start, append, run, &generated);
    if (status != PHOTON_OK) return status;
    run->calls.push_back({start, start + generated, photon_session_stop_reason(s)});
    if (generated == 0) break;
  }
  return PHOTON_OK;
}

// The tokens prefilled after the first run, and the budget of the second.
inline const std::vector<int32_t>& known_tokens() {
  static const std::vector<int32_t> known = {5, 77, 200};
  return known;
}
constexpr int32_t kThenBudget = 10;

struct Continuation {
  Run first;
  photon_status prefill = PHOTON_OK;
  std::vector<float> known_logprobs;
  Run then;
  bool operator==(const Continuation&) const = default;
};

// Runs `budget` tokens, prefills known_tokens() and runs kThenBudget more. Returns PHOTON_OK or
// the first failing generate call's status (a failing prefill is recorded instead: at a full
// context it fails, and what the session does then is part of the continuation).
inline photon_status continue_session(photon_session* s, int32_t budget, Continuation* c) {
  if (const photon_status status = run_calls(s, budget, &c->first); status != PHOTON_OK)
    return status;
  c->known_logprobs.assign(known_tokens().size(), 0.0f);
  c->prefill = photon_session_prefill_logprobs(s, known_tokens().data(), known_tokens().size(),
                                               c->known_logprobs.data());
  if (c->prefill != PHOTON_OK) c->known_logprobs.clear();
  return run_calls(s, kThenBudget, &c->then);
}

// What a session saved after `at` tokens of `whole` and restored runs, with `whole`'s budget less
// `at`: the tokens from `at` on, and the calls from the one that was running at `at` (or began
// there) on, counted from `at`.
inline Run tail(const Run& whole, int32_t at) {
  Run out;
  const auto from = static_cast<std::ptrdiff_t>(at);
  out.tokens.assign(whole.tokens.begin() + from, whole.tokens.end());
  out.pieces.assign(whole.pieces.begin() + from, whole.pieces.end());
  out.logprobs.assign(whole.logprobs.begin() + from, whole.logprobs.end());
  out.top.assign(whole.top.begin() + from, whole.top.end());
  for (const Call& c : whole.calls)
    if (c.end > at || c.start == at)
      out.calls.push_back({std::max(c.start, at) - at, c.end - at, c.reason});
  return out;
}

// Pieces travel as byte arrays (a piece may hold any bytes); floats as doubles, which hold them
// exactly.
inline nlohmann::json to_json(const Run& run) {
  nlohmann::json pieces = nlohmann::json::array(), calls = nlohmann::json::array();
  for (const std::string& p : run.pieces)
    pieces.push_back(std::vector<uint8_t>(p.begin(), p.end()));
  for (const Call& c : run.calls) calls.push_back({c.start, c.end, static_cast<int>(c.reason)});
  return {{"tokens", run.tokens},
          {"pieces", pieces},
          {"logprobs", run.logprobs},
          {"top", run.top},
          {"calls", calls}};
}

inline nlohmann::json to_json(const Continuation& c) {
  return {{"first", to_json(c.first)},
          {"prefill", static_cast<int>(c.prefill)},
          {"known_logprobs", c.known_logprobs},
          {"then", to_json(c.then)}};
}

inline Run from_json(const nlohmann::json& j) {
  Run run;
  run.tokens = j.at("tokens").get<std::vector<int32_t>>();
  for (const auto& p : j.at("pieces")) {
    const auto bytes = p.get<std::vector<uint8_t>>();
    run.pieces.emplace_back(bytes.begin(), bytes.end());
  }
  run.logprobs = j.at("logprobs").get<std::vector<float>>();
  run.top = j.at("top").get<std::vector<Alternatives>>();
  for (const auto& c : j.at("calls"))
    run.calls.push_back({c.at(0).get<int32_t>(), c.at(1).get<int32_t>(),
                         static_cast<photon_stop_reason>(c.at(2).get<int>())});
  return run;
}

inline Continuation continuation_from_json(const nlohmann::json& j) {
  return {from_json(j.at("first")), static_cast<photon_status>(j.at("prefill").get<int>()),
          j.at("known_logprobs").get<std::vector<float>>(), from_json(j.at("then"))};
}

}  // namespace photon::state_runs
