// Hugging Face LlamaForCausalLM and MistralForCausalLM checkpoints as vanilla models. The vanilla
// architecture is LLaMA's (RMSNorm, rotate-half RoPE, grouped KV heads, SwiGLU, no biases), and
// Hugging Face stores q_proj / k_proj with rows in the rotate-half order, so the weights map
// one to one; what the engine cannot compute exactly (scaled RoPE, sliding windows, biases, other
// activations, quantized weights) is refused, naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"

namespace photon {

struct HfModel {
  std::string architecture;  // "LlamaForCausalLM" or "MistralForCausalLM"
  ModelConfig config;        // a vanilla configuration
  bool tied_embeddings = false;
  // As config.json gives them (absent or null: not given); the tokenizer must agree.
  std::optional<int32_t> bos_token_id, eos_token_id;
};

// True for a Hugging Face config.json (it names "architectures" or "model_type"), false for the
// SDK's interchange configuration (it names "arch"). Throws Error(PHOTON_ERR_BAD_CONFIG) for text
// that is neither.
bool is_hf_config(const std::string& json, const std::string& origin);

// Maps a Hugging Face config.json. Throws Error naming `origin` and the field:
// PHOTON_ERR_UNSUPPORTED for what the engine cannot run, PHOTON_ERR_BAD_CONFIG for a missing or
// malformed field or a configuration the vanilla model does not allow.
HfModel hf_config_from_json(const std::string& json, const std::string& origin);

// The Hugging Face name of a vanilla tensor (expected_tensors names): "tok_emb" ->
// "model.embed_tokens.weight", "layers.3.attn.wq" -> "model.layers.3.self_attn.q_proj.weight", ...;
// "lm_head" is the embedding when the embeddings are tied.
std::string hf_tensor_name(const std::string& name, bool tied_embeddings);

// Tensors a Hugging Face checkpoint may hold that the engine computes itself
// (model.layers.N.self_attn.rotary_emb.inv_freq, from rope_theta).
bool hf_derived_tensor(const std::string& name);

}  // namespace photon
