// The encoder-consistent state of spec section 5 (HierGen): every level's encoder cache, the
// complete children of each level's open unit, and each level's open window. Prefill and RecGen's
// start-up build on it as well.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/levels.h"
#include "engine/runner.h"

namespace photon {

struct HierLevel {
  KvCache encoder;  // X(l) of the complete level-l units so far
  Matrix pending;   // [C_l, D_{l-1}]: latents of the open unit's complete children
  int n_pending = 0;
  Window window;  // the open level-l unit's window
};

struct HierGenState {
  std::vector<HierLevel> levels;  // index l - 1
  Matrix top_last;                // [1, D_L]: X(L) of the last complete top unit
  bool has_top = false;
  int64_t pos = 0;  // tokens consumed

  // encoder_capacity[l - 1]: complete level-l units the encoder cache can hold; every KV cache in
  // kv_type.
  void allocate(const Model& model, std::span<const int> encoder_capacity, DType kv_type);
  // allocate without the windows, for a prompt's state that is encoded and then dropped
  // (RecGen's: its hier_append jobs never open windows); the encoder caches hold first_units[l - 1]
  // units at once (KvCache's default when first_units is empty).
  void allocate_encoders(const Model& model, std::span<const int> encoder_capacity,
                         std::span<const int> first_units, DType kv_type);
  HierLevel& level(int l) { return levels[l - 1]; }
  const HierLevel& level(int l) const { return levels[l - 1]; }
  // The hidden state that predicts token `pos` (the level-1 window's latest output).
  Tensor hidden() const { return levels[0].window.latest(); }
};

// What hier_append and hier_step write: the latents passed up the levels, the gathered children
// and inputs, and the scratch of the encoders and windows they run.
struct HierScratch {
  Scratch latent_a, latent_b, pending, embedded;
  LevelScratch levels;
};

// One state's part of hier_append: the tokens it consumes, and its full token history including
// them (level-1 windows take the open unit's tokens from it).
struct AppendJob {
  HierGenState* state;
  std::span<const int32_t> tokens;
  std::span<const int32_t> history;
  // Whether hier_append rebuilds the state's windows. A state that takes more tokens before it is
  // used (the next slice of its prompt) or is discarded (RecGen's prompts, which start windows of
  // their own) skips them: they are half the launches of a pass, over a few rows each. Its
  // windows stay those of an earlier position until open_hier_windows rebuilds them.
  bool open_windows;
};

// Consumes each job's tokens in parallel (spec 5, prefill): the encoders step over every unit
// that completes, then the windows of the open unit at every level are rebuilt top-down for the
// jobs that ask for them. The jobs (distinct states) share each level's GEMMs.
void hier_append(const Model& model, std::span<const AppendJob> jobs, HierScratch& scratch);

// Rebuilds the windows of each job's open units top-down, as hier_append does after its tokens
// (the state has consumed them already).
void open_hier_windows(const Model& model, std::span<const AppendJob> jobs, HierScratch& scratch);

// Consumes one token per state incrementally (spec 5, HierGen): it completes its level-1 unit or
// feeds the level-1 window; a completed unit steps its level's encoder and feeds the parent, and so
// on up; new windows then open top-down below the highest level that changed. The states advance
// level by level together, so each level's GEMMs cover every state that reaches it.
void hier_step(const Model& model, std::span<HierGenState* const> states,
               std::span<const int32_t> tokens, HierScratch& scratch);

// Initial conditioner of the top level's open unit: X(L) of the previous unit, or the learned
// start.
Tensor top_conditioner(const Model& model, const HierGenState& st);

std::unique_ptr<Runner> make_hiergen_runner(const Model& model);

}  // namespace photon
