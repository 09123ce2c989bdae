// The model logic of one generation mode (HierGen, RecGen, vanilla) over a span of sessions: each
// call batches the work of all the sessions it is given, so that every weight matrix is applied
// once to the rows of all of them. A runner holds nothing but its scratch memory: the state it
// works on lives in each session (engine/session.h), so any runner of the mode can serve any of
// its sessions. Each session holds one for its own calls (prefill, save, ...); a batch of sessions
// (DecodeBatch, prefill_batch) drives runners of its own (Runners).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/tensor.h"

namespace photon {

class Model;
struct Session;
class StateWriter;
class StateReader;

enum class Mode { HierGen, RecGen, Vanilla };
// Every mode, in the order in which a batch of several modes runs them.
constexpr Mode kModes[] = {Mode::HierGen, Mode::RecGen, Mode::Vanilla};

// A position whose next-token distribution is ready: logits = hidden . lm_head^T.
struct Lane {
  int64_t position;
  Tensor hidden;  // [1, D_t] (or [1, D] for vanilla)
};

struct KvBytes {
  uint64_t encoder = 0;
  uint64_t window = 0;
};

class Runner {
 public:
  explicit Runner(const Model& model) : model_(model) {}
  virtual ~Runner() = default;
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Gives the session a fresh state for its context length.
  virtual void init(Session& s) const = 0;
  // Consumes tokens after the history, in parallel, in slices of kPrefillSlice tokens between which
  // a cancellation request is honoured (Error PHOTON_ERR_CANCELLED): HierGen and vanilla then keep
  // the slices consumed so far, RecGen keeps its state from before the call (after generation,
  // the units consumed so far). logprobs (may be null) receives log p(tokens[i] | all before it)
  // under the mode's conditioning (NaN for a session's very first token).
  virtual void prefill(Session& s, std::span<const int32_t> tokens, float* logprobs) = 0;
  static constexpr size_t kPrefillSlice = 512;
  // Consumes tokens[i] after sessions[i]'s history (sessions of this runner's mode, each once), as
  // prefill() would without log-probabilities, with the sessions' rows sharing each GEMM: passes
  // of at most the backend's prefill_pass_rows() tokens, slices of at most kPrefillSlice per
  // session. A cancellation request on any of them stops the batch between passes (Error
  // PHOTON_ERR_CANCELLED); each session then keeps what prefill() keeps.
  virtual void prefill_batch(std::span<Session* const> sessions,
                             std::span<const std::span<const int32_t>> tokens) = 0;
  // Brings each session's caches up to every token it knows: its history and, in a mode that
  // consumes sampled tokens before they are delivered (RecGen's windows), the tokens its stream
  // holds sampled ahead. Afterwards lanes() gives the positions whose distributions are ready.
  virtual void catch_up(std::span<Session* const> sessions) = 0;
  // The session's lanes after catch_up, in position order from its next position: each a position
  // whose token is not known yet. Changes nothing.
  virtual void lanes(const Session& s, std::vector<Lane>& out) const = 0;
  // Drops what the caches consumed beyond the history (Session::discard_ahead, before the tokens
  // sampled ahead are forgotten). A mode that consumes a token only once it is delivered (HierGen,
  // vanilla) holds nothing beyond the history: this default does nothing.
  virtual void rollback(Session& s) const;
  // Whether the session's next prefill encodes its history again with the new tokens (RecGen
  // before it generates: it keeps no encoder cache below its top level), so that a prompt read in
  // pieces costs the square of its length and is best given in one call.
  virtual bool rereads_history(const Session&) const { return false; }
  // Bytes of KV cache in use at level l (1-based; vanilla has one level).
  virtual KvBytes kv_bytes(const Session& s, int level) const = 0;
  // Writes the mode's table of a saved state (StateWriter::set_mode); the session holds no token
  // beyond its history.
  virtual void save(const Session& s, StateWriter& out) const = 0;
  // Restores the mode's table into a session made by init() whose history is already set;
  // validates everything.
  virtual void restore(Session& s, const StateReader& in) const = 0;

 protected:
  // One pass of a batched prefill: the sessions it advances and, for each, its next slice.
  struct PrefillPass {
    std::vector<size_t> index;  // of each session in the batch
    std::vector<Session*> sessions;
    std::vector<std::span<const int32_t>> slices;
  };
  // Tokens in one pass of a batched prefill (the backend's prefill_pass_rows()).
  size_t pass_tokens() const;
  // Splits prefill_batch's work into passes of at most pass_tokens() (in order; a session's slices
  // in order), after honouring the sessions' cancellation requests before each.
  void in_passes(std::span<Session* const> sessions,
                 std::span<const std::span<const int32_t>> tokens,
                 const std::function<void(const PrefillPass&)>& pass) const;

  const Model& model_;
};

// The runner of `mode` for a model (which outlives it).
std::unique_ptr<Runner> make_runner(Mode mode, const Model& model);

// A runner of each mode: the runners of a batch whose sessions may be of several modes. Each is
// made, with scratch memory of its own, when first asked for, unless a session lent its own.
// Whose runners serve a batched call: the sessions' own (Session::runner), whose scratch then
// stays with them for later calls, or the call's own, freed when it returns (the serving engine,
// whose memory budget counts what its requests' sessions hold between steps).
enum class RunnerScratch { Sessions, Call };

class Runners {
 public:
  explicit Runners(const Model& model) : model_(model) {}
  // Serves the session's mode with the session's own runner (Session::runner) if that mode has no
  // runner yet, so that the scratch it grew in earlier calls is reused. Only while no other
  // thread can use that session.
  void borrow(Session& session);
  Runner& of(Mode mode);

 private:
  const Model& model_;
  std::array<std::unique_ptr<Runner>, std::size(kModes)> owned_;
  std::array<Runner*, std::size(kModes)> runners_{};
};

}  // namespace photon
