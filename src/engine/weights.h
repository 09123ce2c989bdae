// The model's tensors bound into per-module structs of f32 pointers. f32 files are used in place
// from the memory mapping; f16 / bf16 tensors are widened once into owned buffers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "format/model_file.h"

namespace photon {

struct LayerWeights {
  const float* attn_norm;  // [D]
  const float* wq;         // [H d_h, D]
  const float* wk;         // [H_kv d_h, D]
  const float* wv;         // [H_kv d_h, D]
  const float* wo;         // [D, H d_h]
  const float* ffn_norm;   // [D]
  const float* w_gate;     // [F, D]
  const float* w_up;       // [F, D]
  const float* w_down;     // [D, F]
};

struct StackWeights {
  StackConfig config;
  int dim = 0;  // D, the stack's width
  std::vector<LayerWeights> layers;
  const float* norm = nullptr;  // [D]
};

struct LevelWeights {
  // Linear chunker only (null for concat).
  const float* chunker_norm = nullptr;  // [C D_{l-1}]
  const float* chunker_w = nullptr;     // [D_l, C D_{l-1}]
  const float* chunker_b = nullptr;     // [D_l]
  StackWeights encoder;                 // width D_l
  const float* converter_w = nullptr;   // [R E_l, D_l]
  const float* converter_b = nullptr;   // [R E_l]
  StackWeights decoder;                 // width E_l
};

struct Weights {
  // photon
  const float* tok_emb_enc = nullptr;  // [V, D_e]
  std::vector<LevelWeights> levels;    // index l - 1
  const float* start = nullptr;        // [D_L]
  const float* tok_emb_dec = nullptr;  // [V, D_t]
  // vanilla
  const float* tok_emb = nullptr;  // [V, D]
  StackWeights stack;
  // both
  const float* lm_head = nullptr;  // [V, D_t] or [V, D]

  const LevelWeights& level(int l) const { return levels[l - 1]; }

  // Binds every tensor of a verified file, widening non-f32 ones.
  static std::unique_ptr<Weights> bind(const ModelFile& file);

 private:
  std::vector<std::vector<float>> owned_;
};

}  // namespace photon
