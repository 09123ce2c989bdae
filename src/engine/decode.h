// Decoding: a batch of generation tasks stepped one round at a time (DecodeBatch), and the calls
// that loop over one: photon_session_generate(_batch) and photon_session_next_token.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/scratch.h"
#include "engine/session.h"

namespace photon {

// Receives each delivered token; returning false stops that task.
using TokenSink = std::function<bool(const DeliveredToken& token)>;

// Throws what a decoding call refuses a session for: unusable, holding no tokens (not even BOS),
// or holding a token that the pull API could not hand over. `who` names the call; `index` is the
// session's place in a batch call (none: a call of one session).
void require_decodable(const Session& s, std::string_view who, std::optional<size_t> index);

// A session generating: its sink, its budget, and how far it got.
struct DecodeTask {
  uint64_t id;  // 0, 1, 2, ... in the order the batch was given its tasks
  Session* session;
  TokenSink sink;       // may be empty
  int64_t limit;        // no token at or beyond this position (the call's budget)
  int32_t max_deliver;  // finish after delivering this many (the pull API asks for 1)
  int32_t delivered = 0;
  photon_stop_reason reason = PHOTON_STOP_NONE;  // stays NONE if it ended by max_deliver
};

// Sessions of one model generating together. Each task is a session (in at most one task) with
// its sink, a position limit and a number of tokens to deliver; tasks join and leave between
// steps. A step shifts the context of each full session that has the context shift on, catches
// every session's caches up, samples every ready lane of every session with one LM-head GEMM,
// feeds the tokens back, and delivers tokens to each task strictly in position order through the
// stop rules (EOS, limit, context, stop strings, sink, cancel); the tasks that stop leave the
// batch. Sessions of several modes may share a batch: it drives a runner for each mode (Runners),
// its own or one a session lent (borrow_runner); no task state lives in a runner.
class DecodeBatch {
 public:
  explicit DecodeBatch(const Model& model) : model_(model), runners_(model) {}

  // Drives the session's mode with the session's own runner (Runners::borrow) rather than one of
  // the batch's own, so that a loop of short calls (the serving engine steps one token at a time)
  // reuses the scratch grown by the calls before it. Only for a session whose task, once added,
  // stays until the batch is no longer stepped: remove() would hand the session back while the
  // batch still uses its runner. Before its task is added.
  void borrow_runner(Session& session) { runners_.borrow(session); }

  // A task for a session of this model that require_decodable accepts: up to max_deliver tokens,
  // none at or beyond position `limit`, each given to `sink` (may be empty). A cancellation
  // requested before it stops the task at its first step (generate() forgets such a request
  // before it adds its tasks; a pull keeps it). Returns the task's id.
  uint64_t add(Session& session, TokenSink sink, int64_t limit, int32_t max_deliver);
  // Removes a task that has not finished. Its session forgets the tokens it sampled ahead of
  // delivery (Session::discard_ahead): it is as if the task had stopped after its last delivered
  // token.
  void remove(uint64_t id);
  // One round. Returns the tasks that finished in it (their streams' stop_reason set), which have
  // left the batch. If it fails, the batch is left empty and the sessions of its tasks unusable
  // (changing()).
  std::vector<DecodeTask> step();
  bool empty() const { return tasks_.empty(); }

 private:
  // Moves the tasks that are done to `finished`.
  void take_finished(std::vector<DecodeTask>& finished);
  // Runs each mode's runner's catch_up over the sessions of `tasks`.
  void catch_up(const std::vector<DecodeTask*>& tasks);
  // Samples every ready lane of the sessions of `sampling` with one LM-head GEMM and feeds the
  // tokens back.
  void sample_lanes(const std::vector<DecodeTask*>& sampling);

  const Model& model_;
  Runners runners_;
  std::vector<DecodeTask> tasks_;
  uint64_t next_id_ = 0;
  Scratch hidden_, logits_;
  // Reused from step to step.
  std::vector<Session*> active_, caught_up_, group_;
  std::vector<DecodeTask*> sampling_;
  std::vector<std::vector<Lane>> lanes_;
};

// photon_session_generate(_batch): up to max_tokens (>= 0) more tokens for each session (of one
// model, each once), decoded together; sinks[i] (may be empty) receives session i's tokens.
// Returns how many each delivered; each stream's stop_reason says why it stopped. `batch` words
// the messages for a batch ("session i ...").
std::vector<int32_t> generate(std::span<Session* const> sessions, int32_t max_tokens,
                              std::span<const TokenSink> sinks, std::string_view who, bool batch,
                              RunnerScratch scratch = RunnerScratch::Sessions);

// photon_session_next_token: the session's next token, decoded unless one is held already. It
// stays held (and is returned again) until take_next(); null when the session stopped (its
// stream's stop_reason says why).
const Stream::Held* next_token(Session& session, std::string_view who);
inline void take_next(Session& session) {
  session.stream.held.reset();
}

}  // namespace photon
