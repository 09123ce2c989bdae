// Teacher-forced scoring (spec 3.4 and 4): PHOTON runs the encoders over every complete unit, then
// the windows of every unit top-down; vanilla runs its stack over the whole sequence. All in
// parallel.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "engine/model.h"

namespace photon {

// out[i] = log p(t_i | t_<i) for i >= 1, NaN for i = 0. With top.k, also each position's most
// likely ids (Backend::logprobs); row 0 holds ids -1 and NaN.
void score_tokens(const Model& model, std::span<const int32_t> tokens, float* out,
                  TopRows top = {});

// How photon_model_score_with scores a sequence: teacher-forced, or as a RecGen session given
// the first prompt_tokens tokens; longer than the model's context, in sliding windows that start
// `stride` tokens apart (0: half the context).
struct ScoreSettings {
  bool recgen = false;
  size_t prompt_tokens = 1;
  int64_t stride = 0;
};

// The windows of a sequence of n tokens for a model of `context` tokens: window w covers
// [w * stride, min(w * stride + context, n)) and scores the tokens after the previous window's
// end (the first window scores all of its own), so every token after the first is scored once,
// with at least context - stride tokens before it in its window. One window when n <= context.
struct ScoreWindow {
  int64_t begin, first_scored, end;
};
std::vector<ScoreWindow> score_windows(int64_t n, int64_t context, int64_t stride);

// out[i] = log p(tokens[i] | the tokens before it in its window), NaN for i = 0, for any number
// of tokens, each window scored by score_tokens or score_recgen (whose prompt is, in a later
// window, the part that the window before it scored). With top.k, teacher-forced only, also each
// position's most likely ids, as score_tokens. Throws Error PHOTON_ERR_NOT_FINITE when a
// log-probability is not finite (a NaN or an infinite logit), PHOTON_ERR_INVALID_ARGUMENT for a
// stride of the context or more when windows are needed, PHOTON_ERR_UNSUPPORTED for
// alternatives in RecGen.
void score_sequence(const Model& model, std::span<const int32_t> tokens,
                    const ScoreSettings& settings, float* out, std::string_view who,
                    TopRows top = {});

// out[i] = log p(tokens[i] | history, tokens[<i]) under teacher forcing (NaN for the very first
// token of a sequence): a scoring pass over the history and the tokens.
void teacher_forced_logprobs(const Model& model, std::span<const int32_t> history,
                             std::span<const int32_t> tokens, float* out);

}  // namespace photon
