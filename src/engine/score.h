// Teacher-forced scoring (spec 3.4 and 4): PHOTON runs the encoders over every complete unit, then
// the windows of every unit top-down; vanilla runs its stack over the whole sequence. All in
// parallel.
#pragma once

#include <span>

#include "engine/model.h"

namespace photon {

// out[i] = log p(t_i | t_<i) for i >= 1, NaN for i = 0.
void score_tokens(const Model& model, std::span<const int32_t> tokens, float* out);

// out[i] = log p(tokens[i] | history, tokens[<i]) under teacher forcing (NaN for the very first
// token of a sequence): a scoring pass over the history and the tokens.
void teacher_forced_logprobs(const Model& model, std::span<const int32_t> history,
                             std::span<const int32_t> tokens, float* out);

}  // namespace photon
