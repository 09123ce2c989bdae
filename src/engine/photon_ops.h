// The PHOTON-specific passes over rows, shared by scoring, prefill, HierGen and RecGen: chunker +
// encoder steps over complete units, and local decoder windows. Each takes a list of jobs so that
// many units (and, for batched decoding, many sessions) share one GEMM per weight matrix.
#pragma once

#include <span>
#include <vector>

#include "engine/model.h"
#include "engine/stack.h"
#include "engine/weights.h"
#include "engine/window.h"

namespace photon {

struct Scratch {
  StackScratch stack;
  std::vector<float> x, chunk, cond, logits;
};

// Encodes `units` complete level-l units whose children latents X(l-1) are the consecutive rows
// `children` [units * C_l, D_{l-1}], appending them to `cache` (spec 3.2); writes X(l) to out
// [units, D_l].
struct EncodeJob {
  KvCache* cache;
  const float* children;
  int units;
  float* out;
};
void encode_units(const Model& model, int level, std::span<const EncodeJob> jobs, Scratch& s);

// Runs level-l windows. A job with `cond` [D_l] opens its window afresh (prefix = converter(cond))
// and yields o_0; then each of its `n_inputs` rows y [E_l] is the next child's input and yields the
// next output. Outputs land in window->outputs.
struct WindowJob {
  Window* window;
  const float* cond;
  const float* inputs;
  int n_inputs;
};
void run_windows(const Model& model, int level, std::span<const WindowJob> jobs, Scratch& s);

// Copies rows `ids` of an embedding table [V, dim] to out [n, dim].
void gather_rows(const float* table, int dim, std::span<const int32_t> ids, float* out);

// Allocates a window of level l sized for its config.
void allocate_window(const Model& model, int level, Window* window);

// Teacher-forced log-probabilities (spec 3.4): out[i] = log p(t_i | t_<i) for i >= 1, NaN for i = 0.
void score_tokens(const Model& model, std::span<const int32_t> tokens, float* out);

// log softmax(hidden . lm_head^T)[token] for each row; hidden [n, D_t].
void token_logprobs(const Model& model, const float* hidden, std::span<const int32_t> tokens,
                    float* out, Scratch& s);

}  // namespace photon
