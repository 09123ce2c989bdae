// RecGen (spec section 5): after prefill only the top encoder's cache is kept. Above level 1 the
// open units' child latents ("plans") do not depend on sampled tokens, so each level-2 unit's plan
// is computed as soon as it opens and all its level-1 windows decode together.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/runner.h"
#include "engine/window.h"

namespace photon {

struct RecGenState {
  KvCache top;      // level-L encoder cache: the only cache that grows
  Matrix top_last;  // [1, D_L]: X(L) of the last complete top unit
  bool has_top = false;
  std::vector<Matrix> plans;  // plans[l]: [C_l, D_{l-1}] latents of the level-l unit's children
  std::vector<Window> group;  // level-1 windows of the open level-2 unit
  int64_t group_start = 0;    // position of the group's first token
  // Tokens after the prompt were consumed (generated, or known ones consumed alike): more tokens
  // continue RecGen's own latents instead of re-encoding a prompt.
  bool generated = false;
};

std::unique_ptr<Runner> make_recgen_runner(const Model& model);

// The log-probabilities a RecGen session assigns to `tokens` (spec 5; docs/model.md): the first
// prompt_tokens (>= 1) are the prompt, consumed teacher-forced (out[1 .. prompt_tokens - 1] are
// teacher forcing's), every later token is consumed as RecGen consumes a token it sampled.
// out[0] is NaN; prompt_tokens >= tokens.size() is teacher forcing throughout.
void score_recgen(const Model& model, std::span<const int32_t> tokens, size_t prompt_tokens,
                  float* out);

}  // namespace photon
