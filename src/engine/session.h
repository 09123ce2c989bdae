// One generation stream over a model: its token history, the state of its mode (the caches the
// runner works on), its sampler settings and what it delivers. The functions here and in
// engine/decode.h are the operations of photon_session_*; they enforce the session's rules, so
// that the C layer only checks its arguments.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "core/sampling.h"
#include "engine/hiergen.h"
#include "engine/model.h"
#include "engine/recgen.h"
#include "engine/runner.h"
#include "engine/stream.h"
#include "engine/vanilla.h"

namespace photon {

using ModeState = std::variant<HierGenState, RecGenState, VanillaState>;

// The mode a model generates with by default: vanilla's own; for PHOTON the one its file
// recommends (metadata "photon.default_mode": "hiergen" or "recgen", written by the trainer from
// what it measured), else RecGen where the model has it (L >= 2), else HierGen.
Mode default_mode(const Model& model);

struct Session {
  // Throws Error(PHOTON_ERR_UNSUPPORTED) for RecGen on vanilla or a one-level model.
  static std::unique_ptr<Session> create(const Model& model, Mode mode, int context,
                                         const SamplerConfig& sampler, DType kv_type);

  const Model& model;
  const Mode mode;
  const int context;    // tokens the caches hold at most
  const DType kv_type;  // storage of the session's KV caches
  std::vector<int32_t> history;
  ModeState state;
  std::unique_ptr<Runner> runner;
  SamplerConfig sampler;
  // photon_session_options_set_context_shift: a full context keeps its last half and goes on.
  bool context_shift = false;
  Stream stream;
  std::atomic<bool> cancel_requested{false};

  template <typename State>
  State& as() {
    return std::get<State>(state);
  }
  template <typename State>
  const State& as() const {
    return std::get<State>(state);
  }

  // Throws Error(PHOTON_ERR_CANCELLED) when a cancellation was requested.
  void check_cancel() const;
  // Forgets the tokens sampled ahead and rolls the caches back to the history (before a prefill,
  // save or sampler change: draws are keyed by position, so they will be sampled again alike).
  void discard_ahead();

  // photon_session_prefill(_logprobs): validates the tokens against the vocabulary and the
  // context, then consumes them in parallel; logprobs (may be null) as Runner::prefill.
  void prefill(std::span<const int32_t> tokens, std::string_view who, float* logprobs = nullptr);
  // Throws what prefill() throws for these tokens (bad ids, a full context, an unusable session)
  // without changing anything.
  void check_prefill(std::span<const int32_t> tokens, std::string_view who) const;
  // photon_session_set_sampler.
  void set_sampler(const SamplerConfig& config, std::string_view who);
  // The context shift, for a session whose history fills its context (of at least 2 tokens):
  // the session becomes what a new session of its settings is after a prefill of the last
  // context / 2 tokens of its history (its caches rebuilt from them; tokens sampled ahead are
  // dropped, the delivered text stays for stop strings). Returns how many tokens left the front
  // of the history. Its caches exist twice while the new ones are built.
  int64_t shift_context();
  // photon_session_kv_bytes.
  KvBytes kv_bytes(int level, std::string_view who) const;

 private:
  Session(const Model& m, Mode md, int ctx, const SamplerConfig& s, DType kv)
      : model(m), mode(md), context(ctx), kv_type(kv), sampler(s) {}
};

// photon_session_prefill_batch: checks every session's tokens (messages say "session i") before
// any is consumed, then consumes tokens[i] into sessions[i] (sessions of one model, each once),
// the sessions of each mode together (Runner::prefill_batch).
void prefill_batch(std::span<Session* const> sessions,
                   std::span<const std::span<const int32_t>> tokens, std::string_view who);

// Runs `body`, a step that changes the sessions' caches; if it fails (other than by cancellation,
// which stops between consistent steps), the sessions are marked unusable.
template <typename Body>
void changing(std::span<Session* const> sessions, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.status() != PHOTON_ERR_CANCELLED)
      for (Session* s : sessions) s->stream.broken = e.status();
    throw;
  } catch (const std::bad_alloc&) {
    for (Session* s : sessions) s->stream.broken = PHOTON_ERR_OUT_OF_MEMORY;
    throw;
  } catch (...) {
    for (Session* s : sessions) s->stream.broken = PHOTON_ERR_INTERNAL;
    throw;
  }
}

}  // namespace photon
