// The plain Transformer of spec section 4: one KV cache and the output of the last position.
#pragma once

#include <memory>

#include "engine/kv_cache.h"
#include "engine/runner.h"

namespace photon {

struct VanillaState {
  KvCache cache;
  Matrix hidden;  // [1, D]: output of the last consumed position
};

std::unique_ptr<Runner> make_vanilla_runner(const Model& model);

}  // namespace photon
