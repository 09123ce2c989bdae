// The PHOTON-specific passes over rows, shared by scoring, prefill, HierGen and RecGen: chunker +
// encoder steps over complete units, and local decoder windows. Each takes a list of jobs so that
// many units (and, for batched decoding, many sessions) share one GEMM per weight matrix.
#pragma once

#include <span>

#include "engine/model.h"
#include "engine/scratch.h"
#include "engine/stack.h"
#include "engine/window.h"

namespace photon {

// What encode_units and run_windows write: the rows they gather, and the stack's activations.
struct LevelScratch {
  Scratch rows, chunk, cond;
  StackScratch stack;
};

// Encodes `units` complete level-l units whose children latents X(l-1) are the consecutive rows
// of `children` [units * C_l, D_{l-1}], appending them to `cache` (spec 3.2); writes X(l) to `out`
// [units, D_l].
struct EncodeJob {
  KvCache* cache;
  Tensor children;
  int units;
  Tensor out;
};
void encode_units(const Model& model, int level, std::span<const EncodeJob> jobs,
                  LevelScratch& scratch);

// Runs level-l windows. A job with a `cond` [1, D_l] opens its window afresh (prefix =
// converter(cond)) and yields o_0; then each of its rows of `inputs` [n, E_l] is the next child's
// input and yields the next output. Outputs land in window->outputs.
struct WindowJob {
  Window* window;
  Tensor cond;    // no buffer: the window continues
  Tensor inputs;  // may have no rows
};
void run_windows(const Model& model, int level, std::span<const WindowJob> jobs,
                 LevelScratch& scratch);

// Allocates a window of level l sized for its config, its KV cache in kv_type.
void allocate_window(const Model& model, int level, Window* window, DType kv_type);

// log softmax(hidden . lm_head^T)[token] for each row; hidden [n, D_t] (or [n, D]). The logits of
// blocks of rows go to `logits`. With top.k, also each row's most likely ids (Backend::logprobs).
void token_logprobs(const Model& model, const Tensor& hidden, std::span<const int32_t> tokens,
                    float* out, Scratch& logits, TopRows top = {});

}  // namespace photon
