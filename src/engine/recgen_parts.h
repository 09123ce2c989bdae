// The parts of RecGen's runner (engine/recgen.cpp: the mode's calls and saved state), each in a
// file of its own:
//   recgen_plan.cpp      the plans: the open units' child latents above level 1, from a prompt or
//                        as each level-2 unit opens
//   recgen_windows.cpp   the level-1 windows of the open level-2 unit: opened from its plan, fed
//                        the known tokens, their lanes, rolled back
//   recgen_continue.cpp  known tokens after generation, consumed as sampled ones are
#pragma once

#include <span>
#include <vector>

#include "engine/hiergen.h"
#include "engine/recgen.h"

namespace photon {

// What the RecGen runner writes.
struct RecGenScratch {
  HierScratch prompt;   // prompts encoded teacher-forced (hier_append)
  LevelScratch levels;  // the plans' and the level-1 windows' runs
  Scratch embedded, hidden, logits;
  // By level: the windows that compute the plans, one per session, reused from call to call. They
  // live for one call, so they stay f32 whatever the sessions' kv type.
  std::vector<std::vector<Window>> plan_windows;
};

// Position of the first token after the open level-2 unit.
inline int64_t group_end(const ModelConfig& c, const RecGenState& r) {
  return r.group_start + c.block_tokens(2);
}

// Whether the session's history ends its open level-2 unit with room for the next.
bool group_done(const ModelConfig& c, const Session& s);

// ---- the plans (recgen_plan.cpp) --------------------------------------------------------------

// The state of each session after its prompt was consumed teacher-forced into prompts[i]: takes
// over its top-level cache and state, computes the plans of its open units top-down, and opens its
// level-1 windows (those the prompt finished stay closed; the open one takes the prompt's tokens).
void start_from_prompts(const Model& model, std::span<Session* const> sessions,
                        std::span<HierGenState> prompts, RecGenScratch& scratch);

// Moves each state to its next level-2 unit: steps the top encoder where a top unit completes,
// computes the new plans top-down and opens the new unit's level-1 windows.
void advance_groups(const Model& model, std::span<RecGenState* const> states,
                    RecGenScratch& scratch);

// ---- the level-1 windows (recgen_windows.cpp) -------------------------------------------------

// Opens the level-1 windows of each state's unit from its level-2 plan: those before
// first_window[i] finished inside the prompt, the first open one takes open_tokens[i].
void open_windows(const Model& model, std::span<RecGenState* const> states,
                  std::span<const int> first_window,
                  std::span<const std::vector<int32_t>> open_tokens, RecGenScratch& scratch);

// Feeds each window the tokens it has not consumed that its session knows: delivered, or sampled
// ahead. Each token enters only its own level-1 window; a session whose windows take one has
// generated (RecGenState::generated).
void feed_windows(const Model& model, std::span<Session* const> sessions, RecGenScratch& scratch);

// A lane per unfinished window: its next position, predicted by its latest output.
void window_lanes(const ModelConfig& c, const RecGenState& r, int64_t next, std::vector<Lane>& out);

// Truncates every window to the first `committed` tokens of the history.
void truncate_windows(const ModelConfig& c, RecGenState& r, int64_t committed);

// ---- continuation after generation (recgen_continue.cpp) ------------------------------------

// Consumes known tokens as RecGen consumes tokens it sampled (spec 5; each enters only its own
// level-1 window), a level-2 unit at a time with all of its windows in one pass. logprobs (may be
// null) receives the log-probability of each token under RecGen's conditioning. A cancellation
// request is honoured between units, which keeps the units consumed so far.
void continue_with(const Model& model, Session& s, std::span<const int32_t> tokens, float* logprobs,
                   RecGenScratch& scratch);

}  // namespace photon
