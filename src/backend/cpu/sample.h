// Token sampling on the CPU, the reference of every backend's sampler: logit bias and penalties,
// then greedy, or temperature with top-k, top-p and min-p (photon.h states the semantics), with the
// counter-based draw sample_uniform(seed, position) of core/sampling.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/sampling.h"

namespace photon::cpu {

class Sampler {
 public:
  // Picks the token for `position` from raw logits [vocab] (modified in place) as include/photon.h
  // defines it. `recent` holds the history the penalties look at. The draw
  // u = sample_uniform(seed, position) takes the first kept token whose cumulative probability
  // exceeds u, walking the tokens ranked by probability when top-k, top-p or min-p is on, else in
  // id order (tests/unit/test_sampling.cpp checks exactly this).
  int32_t sample(const SamplerConfig& config, float* logits, int vocab, int64_t position,
                 std::span<const int32_t> recent);

  // A token the filters have not dropped: its rank (lower ranks first) and unnormalized
  // probability.
  struct Candidate {
    uint64_t key;  // the logit's order, then the id; the id alone when no filter ranks
    double weight;
    int32_t id() const { return static_cast<int32_t>(key & 0xffffffffu); }
  };

 private:
  std::vector<Candidate> candidates_;
};

}  // namespace photon::cpu
