// The model's tensors (spec section 6) bound by the backend into per-module structs, once.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "format/model_file.h"

namespace photon {

struct LayerWeights {
  Tensor attn_norm;  // [1, D]
  Tensor wq;         // [H d_h, D]
  Tensor wk;         // [H_kv d_h, D]
  Tensor wv;         // [H_kv d_h, D]
  Tensor wo;         // [D, H d_h]
  Tensor ffn_norm;   // [1, D]
  Tensor w_gate;     // [F, D]
  Tensor w_up;       // [F, D]
  Tensor w_down;     // [D, F]
};

struct StackWeights {
  StackConfig config;
  int dim = 0;  // D, the stack's width
  std::vector<LayerWeights> layers;
  Tensor norm;  // [1, D]
};

struct LevelWeights {
  // Linear chunker only (empty for concat).
  Tensor chunker_norm;   // [1, C D_{l-1}]
  Tensor chunker_w;      // [D_l, C D_{l-1}]
  Tensor chunker_b;      // [1, D_l]
  StackWeights encoder;  // width D_l
  Tensor converter_w;    // [R E_l, D_l]
  Tensor converter_b;    // [1, R E_l]
  StackWeights decoder;  // width E_l
};

struct Weights {
  // photon
  Tensor tok_emb_enc;                // [V, D_e]
  std::vector<LevelWeights> levels;  // index l - 1
  Tensor start;                      // [1, D_L]
  Tensor tok_emb_dec;                // [V, D_t]
  // vanilla
  Tensor tok_emb;  // [V, D]
  StackWeights stack;
  // both
  Tensor lm_head;  // [V, D_t] or [V, D]

  const LevelWeights& level(int l) const { return levels[l - 1]; }

  // Binds every tensor of a verified file through the backend.
  static std::unique_ptr<Weights> bind(const ModelFile& file, Backend& backend);
};

}  // namespace photon
