// RecGen (spec section 5): after prefill only the top encoder's cache is kept. Above level 1 the
// open units' child latents ("plans") do not depend on sampled tokens, so each level-2 unit's plan
// is computed as soon as it opens and all its level-1 windows decode together.
#pragma once

#include <memory>
#include <vector>

#include "engine/runner.h"
#include "engine/window.h"

namespace photon {

struct RecGenState {
  KvCache top;      // level-L encoder cache: the only cache that grows
  Matrix top_last;  // [1, D_L]: X(L) of the last complete top unit
  bool has_top = false;
  std::vector<Matrix> plans;      // plans[l]: [C_l, D_{l-1}] latents of the level-l unit's children
  std::vector<Window> group;      // level-1 windows of the open level-2 unit
  int64_t group_start = 0;        // position of the group's first token
  std::vector<int> lane_windows;  // the window of each lane of the last lanes() call
  bool generated = false;
};

std::unique_ptr<Runner> make_recgen_runner(const Model& model);

}  // namespace photon
