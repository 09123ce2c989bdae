#include "format/hf_config.h"

#include <cmath>
#include <limits>
#include "core/json.h"
#include <utility>

#include "core/error.h"

namespace photon {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  fail(PHOTON_ERR_BAD_CONFIG, origin + ": " + what);
}

[[noreturn]] void unsupported(const std::string& origin, const std::string& what) {
  fail(PHOTON_ERR_UNSUPPORTED, origin + ": " + what);
}

json parse(const std::string& text, const std::string& origin) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) bad(origin, "the configuration must be a JSON object");
    return j;
  } catch (const json::exception& e) {
    bad(origin, std::string("not valid JSON: ") + e.what());
  }
}

// A field that is absent or null reads as not given.
bool given(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

class Fields {
 public:
  Fields(const json& j, const std::string& origin) : j_(j), origin_(origin) {}

  int positive_int(const char* key) const {
    if (!given(j_, key)) bad(origin_, std::string(key) + " is missing");
    return positive_int(key, 0);
  }
  int positive_int(const char* key, int fallback) const {
    if (!given(j_, key)) return fallback;
    if (!j_[key].is_number_integer()) bad(origin_, std::string(key) + " must be an integer");
    const int64_t v = j_[key].get<int64_t>();
    if (v < 1 || v > std::numeric_limits<int>::max())
      bad(origin_,
          std::string(key) + " must be a positive 32-bit integer, got " + std::to_string(v));
    return static_cast<int>(v);
  }
  float number(const char* key, float fallback) const {
    if (!given(j_, key)) return fallback;
    if (!j_[key].is_number()) bad(origin_, std::string(key) + " must be a number");
    const double v = j_[key].get<double>();
    if (!(std::fabs(v) <= std::numeric_limits<float>::max()))
      bad(origin_, std::string(key) + " is out of range");
    return static_cast<float>(v);
  }
  bool flag(const char* key, bool fallback) const {
    if (!given(j_, key)) return fallback;
    if (!j_[key].is_boolean()) bad(origin_, std::string(key) + " must be true or false");
    return j_[key].get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!given(j_, key)) return fallback;
    if (!j_[key].is_string()) bad(origin_, std::string(key) + " must be a string");
    return j_[key].get<std::string>();
  }
  std::optional<int32_t> token_id(const char* key) const {
    if (!given(j_, key)) return std::nullopt;
    const json& v = j_[key];
    // Several end tokens (a list) would need stop rules the engine does not have; one in a list is
    // that one.
    if (v.is_array() && v.size() == 1) return id_value(key, v[0]);
    if (v.is_array())
      unsupported(origin_, std::string(key) + " lists " + std::to_string(v.size()) +
                               " tokens; the engine has one (the tokenizer's)");
    return id_value(key, v);
  }

 private:
  int32_t id_value(const char* key, const json& v) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(origin_, std::string(key) + " must be a token id");
    return static_cast<int32_t>(v.get<int64_t>());
  }
  const json& j_;
  const std::string& origin_;
};

// The architecture the config names: its "architectures" list if any, else its "model_type".
std::string architecture(const json& j, const std::string& origin) {
  static const std::pair<const char*, const char*> kKnown[] = {{"LlamaForCausalLM", "llama"},
                                                               {"MistralForCausalLM", "mistral"}};
  if (given(j, "architectures")) {
    const json& list = j["architectures"];
    if (!list.is_array() || list.size() != 1 || !list[0].is_string())
      unsupported(origin, "architectures must name one architecture, got " + list.dump());
    const std::string name = list[0].get<std::string>();
    for (const auto& [known, type] : kKnown)
      if (name == known) return name;
    unsupported(origin, "architectures names \"" + name +
                            "\"; LlamaForCausalLM and MistralForCausalLM are supported");
  }
  const std::string type = Fields(j, origin).text("model_type", "");
  for (const auto& [known, known_type] : kKnown)
    if (type == known_type) return known;
  unsupported(origin, "model_type \"" + type + "\" is not supported (llama and mistral are)");
}

// Plain RoPE only: a rope_scaling (or the newer rope_parameters) of any type but "default" changes
// the rotation angles.
void check_rope_type(const json& j, const char* key, const std::string& origin) {
  if (!given(j, key)) return;
  const json& rope = j[key];
  if (!rope.is_object()) bad(origin, std::string(key) + " must be an object or null");
  std::string type = "default";
  for (const char* type_key : {"rope_type", "type"})
    if (given(rope, type_key)) {
      if (!rope[type_key].is_string())
        bad(origin, std::string(key) + "." + type_key + " must be a string");
      type = rope[type_key].get<std::string>();
    }
  if (type != "default")
    unsupported(origin, std::string(key) + " of type \"" + type +
                            "\" is not supported: the engine runs plain RoPE");
}

}  // namespace

bool is_hf_config(const std::string& text, const std::string& origin) {
  const json j = parse(text, origin);
  if (j.contains("arch")) return false;
  if (j.contains("architectures") || j.contains("model_type")) return true;
  bad(origin,
      "neither a PHOTON configuration (no \"arch\") nor a Hugging Face one (no \"architectures\" "
      "or \"model_type\")");
}

HfModel hf_config_from_json(const std::string& text, const std::string& origin) {
  const json j = parse(text, origin);
  const Fields f(j, origin);
  HfModel m;
  m.architecture = architecture(j, origin);
  const bool mistral = m.architecture == "MistralForCausalLM";

  if (given(j, "quantization_config"))
    unsupported(origin, "quantization_config: quantized weights are not supported");
  const std::string act = f.text("hidden_act", "silu");
  if (act != "silu")
    unsupported(origin, "hidden_act \"" + act + "\" is not supported (the engine's FFN is SwiGLU)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (f.flag(bias, false))
      unsupported(origin, std::string(bias) + " is true; the engine's layers have no biases");
  check_rope_type(j, "rope_scaling", origin);
  check_rope_type(j, "rope_parameters", origin);
  if (f.number("partial_rotary_factor", 1.0f) != 1.0f)
    unsupported(origin, "partial_rotary_factor: the engine rotates the whole head");

  ModelConfig& c = m.config;
  c.arch = Arch::Vanilla;
  c.vocab_size = f.positive_int("vocab_size");
  c.dim = f.positive_int("hidden_size");
  c.stack.ffn_dim = f.positive_int("intermediate_size");
  c.stack.layers = f.positive_int("num_hidden_layers");
  c.stack.heads = f.positive_int("num_attention_heads");
  c.stack.kv_heads = f.positive_int("num_key_value_heads", mistral ? 8 : c.stack.heads);
  // As Hugging Face computes it when the config does not say.
  c.stack.head_dim = f.positive_int("head_dim", c.dim / c.stack.heads);
  if (c.stack.heads % c.stack.kv_heads != 0)
    bad(origin, "num_key_value_heads (" + std::to_string(c.stack.kv_heads) +
                    ") must divide num_attention_heads (" + std::to_string(c.stack.heads) + ")");
  // The defaults are those of transformers' LlamaConfig and MistralConfig.
  c.norm_eps = f.number("rms_norm_eps", 1e-6f);
  c.rope_theta = f.number("rope_theta", 10000.0f);
  if (given(j, "rope_parameters") && given(j["rope_parameters"], "rope_theta")) {
    const json& theta = j["rope_parameters"]["rope_theta"];
    if (!theta.is_number()) bad(origin, "rope_parameters.rope_theta must be a number");
    c.rope_theta = Fields(j["rope_parameters"], origin).number("rope_theta", c.rope_theta);
  }
  c.max_seq_len = f.positive_int("max_position_embeddings", mistral ? 4096 * 32 : 2048);
  m.tied_embeddings = f.flag("tie_word_embeddings", false);
  if (mistral) {
    // Mistral attends only to the last sliding_window positions; within the context that is full
    // attention only if the window covers it.
    // Absent: MistralConfig's default window of 4096; null: no window.
    int window = 0;
    if (!j.contains("sliding_window"))
      window = 4096;
    else if (given(j, "sliding_window"))
      window = f.positive_int("sliding_window");
    if (window > 0 && window < c.max_seq_len)
      unsupported(origin, "sliding_window " + std::to_string(window) +
                              " is shorter than the context (max_position_embeddings " +
                              std::to_string(c.max_seq_len) +
                              "): the engine attends to the whole context");
  }
  m.bos_token_id = f.token_id("bos_token_id");
  m.eos_token_id = f.token_id("eos_token_id");
  try {
    validate_config(c);
  } catch (const Error& e) {
    bad(origin, std::string("the vanilla configuration it maps to is invalid: ") + e.what());
  }
  return m;
}

std::string hf_tensor_name(const std::string& name, bool tied_embeddings) {
  if (name == "tok_emb") return "model.embed_tokens.weight";
  if (name == "lm_head") return tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  if (name == "norm") return "model.norm.weight";
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm", "input_layernorm.weight"}, {"attn.wq", "self_attn.q_proj.weight"},
      {"attn.wk", "self_attn.k_proj.weight"},  {"attn.wv", "self_attn.v_proj.weight"},
      {"attn.wo", "self_attn.o_proj.weight"},  {"ffn_norm", "post_attention_layernorm.weight"},
      {"ffn.w_gate", "mlp.gate_proj.weight"},  {"ffn.w_up", "mlp.up_proj.weight"},
      {"ffn.w_down", "mlp.down_proj.weight"}};
  // "layers.{i}.<suffix>"
  const size_t dot = name.find('.', 7);
  if (name.rfind("layers.", 0) == 0 && dot != std::string::npos) {
    const std::string suffix = name.substr(dot + 1);
    for (const auto& [ours, theirs] : kLayer)
      if (suffix == ours) return "model." + name.substr(0, dot + 1) + theirs;
  }
  fail(PHOTON_ERR_INTERNAL, "hf_tensor_name: '" + name + "' is not a vanilla tensor");
}

bool hf_derived_tensor(const std::string& name) {
  const std::string suffix = ".self_attn.rotary_emb.inv_freq";
  return name.rfind("model.layers.", 0) == 0 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace photon
