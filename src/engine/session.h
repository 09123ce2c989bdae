// A generation stream over a model. Subclasses hold the caches of one decoding mode; the
// generator (engine/generate.h) drives them through "lanes": positions whose next-token
// distribution is ready. HierGen and vanilla offer one lane (the next position); RecGen offers one
// per open level-1 window of the current level-2 unit, which it decodes together (spec section 5).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model.h"
#include "engine/photon_ops.h"

namespace photon {

enum class Mode { HierGen, RecGen, Vanilla };

struct Lane {
  int64_t position;     // the token position this lane predicts
  const float* hidden;  // [D_t] (or [D] for vanilla): logits = hidden . lm_head^T
};

struct KvBytes {
  uint64_t encoder = 0;
  uint64_t window = 0;
};

class Session {
 public:
  virtual ~Session() = default;
  const Model& model() const { return model_; }
  Mode mode() const { return mode_; }
  int context_length() const { return context_; }
  const std::vector<int32_t>& history() const { return history_; }

  // Consumes tokens after the history, in parallel, in slices of kPrefillSlice tokens between which
  // a cancellation request is honoured (Error PHOTON_ERR_CANCELLED): HierGen and vanilla then keep
  // the slices consumed so far, RecGen keeps its state from before the call.
  virtual void prefill(std::span<const int32_t> tokens) = 0;
  static constexpr size_t kPrefillSlice = 512;
  // Brings the caches of `group` (sessions of this session's type and model, this one among them)
  // up to date with their histories, batching the work across them.
  virtual void sync_group(std::span<Session* const> group) = 0;
  // Lanes ready to be sampled after sync_group, in position order, all before `limit`. With
  // parallel false, only the lane of the next position.
  virtual void lanes(int64_t limit, bool parallel, std::vector<Lane>& out) = 0;
  // Feeds each session of `group` the tokens sampled for the lanes of its last lanes() call, in
  // the same order. Tokens beyond the history are speculative until committed.
  virtual void feed_group(std::span<Session* const> group,
                          std::span<const std::vector<int32_t>> tokens) {
    (void)group;
    (void)tokens;
  }
  // Appends a delivered token to the history.
  void commit(int32_t token) { history_.push_back(token); }
  // Drops whatever was fed beyond the history.
  virtual void rollback() {}
  // Bytes of KV cache in use at level l (1-based; vanilla has one level).
  virtual KvBytes kv_bytes(int level) const = 0;

  std::atomic<bool> cancel_requested{false};

 protected:
  void check_cancel() const {
    if (cancel_requested.load(std::memory_order_relaxed))
      fail(PHOTON_ERR_CANCELLED, "cancelled by photon_session_cancel");
  }

 protected:
  friend class SessionCodec;
  Session(const Model& model, Mode mode, int context)
      : model_(model), mode_(mode), context_(context) {}
  const Model& model_;
  Mode mode_;
  int context_;
  std::vector<int32_t> history_;
  Scratch scratch_;
};

// Creates a session of `mode` with caches for `context` tokens. Throws Error(PHOTON_ERR_UNSUPPORTED)
// for RecGen on vanilla or a one-level model.
std::unique_ptr<Session> create_session(const Model& model, Mode mode, int context);

}  // namespace photon
