#include "core/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include "core/json.h"

#include "core/error.h"

namespace photon {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  fail(PHOTON_ERR_BAD_CONFIG, origin + ": " + what);
}

void validate_stack(const StackConfig& s, const std::string& name, const std::string& origin) {
  if (s.layers < 1 || s.layers > 4096) bad(origin, name + ".layers must be in 1..4096");
  if (s.heads < 1 || s.heads > 4096) bad(origin, name + ".heads must be in 1..4096");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    bad(origin, name + ".kv_heads must be >= 1 and divide heads");
  if (s.head_dim < 2 || s.head_dim % 2 != 0 || s.head_dim > 4096)
    bad(origin, name + ".head_dim must be even and in 2..4096");
  if (s.ffn_dim < 1 || s.ffn_dim > (1 << 20)) bad(origin, name + ".ffn_dim must be in 1..1048576");
}

void validate_with_origin(const ModelConfig& c, const std::string& origin) {
  constexpr int kMaxDim = 1 << 16;
  if (c.vocab_size < 1 || c.vocab_size > (1 << 24))
    bad(origin, "vocab_size must be in 1..16777216");
  if (!(c.norm_eps > 0.0f) || !(c.norm_eps < 1.0f)) bad(origin, "norm_eps must be in (0, 1)");
  if (!(c.rope_theta > 1.0f) || c.rope_theta > 1e12f)
    bad(origin, "rope_theta must be in (1, 1e12]");
  if (c.max_seq_len < 1 || c.max_seq_len > (1 << 24))
    bad(origin, "max_seq_len must be in 1..16777216");
  if (c.arch == Arch::Vanilla) {
    if (c.dim < 1 || c.dim > kMaxDim) bad(origin, "dim must be in 1..65536");
    validate_stack(c.stack, "stack", origin);
    return;
  }
  if (c.levels.empty() || c.levels.size() > 8) bad(origin, "levels must hold 1..8 levels");
  if (c.embed_dim < 1 || c.embed_dim > kMaxDim) bad(origin, "embed_dim must be in 1..65536");
  if (c.token_dim < 1 || c.token_dim > kMaxDim) bad(origin, "token_dim must be in 1..65536");
  int64_t block = 1;
  for (int l = 1; l <= c.num_levels(); ++l) {
    const LevelConfig& lv = c.level(l);
    const std::string name = "levels[" + std::to_string(l - 1) + "]";
    if (lv.chunk_len < 2 || lv.chunk_len > 64) bad(origin, name + ".chunk_len must be in 2..64");
    if (lv.dim < 1 || lv.dim > kMaxDim) bad(origin, name + ".dim must be in 1..65536");
    if (lv.prefix_len < 1 || lv.prefix_len > 64) bad(origin, name + ".prefix_len must be in 1..64");
    const int64_t chunk_width = int64_t{lv.chunk_len} * c.latent_dim(l - 1);
    if (lv.chunker == ChunkerKind::Concat && chunk_width != lv.dim)
      bad(origin,
          name + ": a concat chunker needs dim == chunk_len * " +
              (l == 1 ? std::string("embed_dim") : "levels[" + std::to_string(l - 2) + "].dim") +
              " (" + std::to_string(chunk_width) + "), got " + std::to_string(lv.dim));
    validate_stack(lv.encoder, name + ".encoder", origin);
    validate_stack(lv.decoder, name + ".decoder", origin);
    block *= lv.chunk_len;
    if (block > (int64_t{1} << 24))
      bad(origin, "the product of chunk_len over levels is too large");
  }
}

StackConfig stack_from_json(const json& j, const std::string& name, const std::string& origin) {
  if (!j.is_object()) bad(origin, name + " must be an object");
  StackConfig s;
  auto get = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number_integer())
      bad(origin, name + "." + key + " must be an integer");
    const int64_t v = j[key].get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int>::max())
      bad(origin, name + "." + key + " is out of range");
    return static_cast<int>(v);
  };
  s.layers = get("layers");
  s.heads = get("heads");
  s.kv_heads = get("kv_heads");
  s.head_dim = get("head_dim");
  s.ffn_dim = get("ffn_dim");
  return s;
}

json stack_to_json(const StackConfig& s) {
  return json{{"layers", s.layers},
              {"heads", s.heads},
              {"kv_heads", s.kv_heads},
              {"head_dim", s.head_dim},
              {"ffn_dim", s.ffn_dim}};
}

void add_stack(std::vector<TensorSpec>& out, const std::string& p, const StackConfig& s,
               int64_t d) {
  for (int i = 0; i < s.layers; ++i) {
    const std::string L = p + "layers." + std::to_string(i) + ".";
    out.push_back({L + "attn_norm", {d}});
    out.push_back({L + "attn.wq", {s.q_dim(), d}});
    out.push_back({L + "attn.wk", {s.kv_dim(), d}});
    out.push_back({L + "attn.wv", {s.kv_dim(), d}});
    out.push_back({L + "attn.wo", {d, s.q_dim()}});
    out.push_back({L + "ffn_norm", {d}});
    out.push_back({L + "ffn.w_gate", {s.ffn_dim, d}});
    out.push_back({L + "ffn.w_up", {s.ffn_dim, d}});
    out.push_back({L + "ffn.w_down", {d, s.ffn_dim}});
  }
  out.push_back({p + "norm", {d}});
}

StackConfig paper_stack(int d, int f, int layers) {
  return {layers, 32, 32, d / 32, f};
}

ModelConfig paper_photon(int d, int f, int de, int layers) {
  ModelConfig c;
  c.arch = Arch::Photon;
  c.vocab_size = 32000;
  c.max_seq_len = 4096;
  c.embed_dim = de;
  c.token_dim = d;
  c.levels.push_back(
      {4, ChunkerKind::Concat, d, 2, paper_stack(d, f, layers), paper_stack(d, f, layers)});
  c.levels.push_back(
      {4, ChunkerKind::Linear, d, 2, paper_stack(d, f, layers), paper_stack(d, f, layers)});
  return c;
}

ModelConfig paper_block(int d, int f, int de, int layers) {
  ModelConfig c = paper_photon(d, f, de, layers);
  c.levels.pop_back();
  return c;
}

ModelConfig paper_vanilla(int d, int f, int layers) {
  ModelConfig c;
  c.arch = Arch::Vanilla;
  c.vocab_size = 32000;
  c.max_seq_len = 4096;
  c.dim = d;
  c.stack = paper_stack(d, f, layers);
  return c;
}

// Small models with the paper's shape ratios, for CPU tests and benchmarks.
ModelConfig small_photon(int levels, int layers) {
  ModelConfig c;
  c.arch = Arch::Photon;
  c.vocab_size = 4096;
  c.max_seq_len = 16384;
  c.embed_dim = 64;
  c.token_dim = 256;
  const StackConfig s{layers, 8, 8, 32, 768};
  c.levels.push_back({4, ChunkerKind::Concat, 256, 2, s, s});
  for (int l = 2; l <= levels; ++l) c.levels.push_back({4, ChunkerKind::Linear, 256, 2, s, s});
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    t["photon-600m"] = paper_photon(1664, 4096, 416, 4);
    t["photon-900m"] = paper_photon(1792, 4608, 448, 5);
    t["photon-1.2b"] = paper_photon(1920, 5120, 480, 6);
    t["block-600m"] = paper_block(1664, 4096, 416, 8);
    t["block-900m"] = paper_block(1792, 4608, 448, 10);
    t["block-1.2b"] = paper_block(1920, 5120, 480, 12);
    t["vanilla-600m"] = paper_vanilla(1664, 4096, 16);
    t["vanilla-900m"] = paper_vanilla(1792, 4608, 20);
    t["vanilla-1.2b"] = paper_vanilla(1920, 5120, 24);
    t["photon-small"] = small_photon(2, 2);
    t["block-small"] = small_photon(1, 4);
    ModelConfig v;
    v.arch = Arch::Vanilla;
    v.vocab_size = 4096;
    v.max_seq_len = 16384;
    v.dim = 256;
    v.stack = {8, 8, 8, 32, 768};
    t["vanilla-small"] = v;
    return t;
  }();
  return table;
}

}  // namespace

int64_t ModelConfig::block_tokens(int l) const {
  int64_t b = 1;
  for (int i = 1; i <= l; ++i) b *= level(i).chunk_len;
  return b;
}

void validate_config(const ModelConfig& config) {
  validate_with_origin(config, "config");
}

ModelConfig config_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(origin, "the configuration must be a JSON object");
  auto get_int = [&](const json& o, const char* key) {
    if (!o.contains(key) || !o[key].is_number_integer())
      bad(origin, std::string(key) + " must be an integer");
    const int64_t v = o[key].get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int>::max())
      bad(origin, std::string(key) + " is out of range");
    return static_cast<int>(v);
  };
  auto get_float = [&](const char* key, float fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_number()) bad(origin, std::string(key) + " must be a number");
    const double v = j[key].get<double>();
    // A double beyond float's range has no float value (the conversion would be undefined).
    if (!(std::fabs(v) <= std::numeric_limits<float>::max()))
      bad(origin, std::string(key) + " is out of range");
    return static_cast<float>(v);
  };
  // A missing key reads as "", which no valid choice is.
  auto get_string = [&](const json& o, const std::string& name, const char* key) {
    if (!o.contains(key)) return std::string();
    if (!o[key].is_string()) bad(origin, name + key + " must be a string");
    return o[key].get<std::string>();
  };
  ModelConfig c;
  const std::string arch = get_string(j, "", "arch");
  if (arch == "photon")
    c.arch = Arch::Photon;
  else if (arch == "vanilla")
    c.arch = Arch::Vanilla;
  else
    bad(origin, "arch must be \"photon\" or \"vanilla\", got \"" + arch + "\"");
  c.vocab_size = get_int(j, "vocab_size");
  c.norm_eps = get_float("norm_eps", 1e-5f);
  c.rope_theta = get_float("rope_theta", 10000.0f);
  c.max_seq_len = get_int(j, "max_seq_len");
  if (c.arch == Arch::Vanilla) {
    c.dim = get_int(j, "dim");
    c.stack = stack_from_json(j, "vanilla", origin);
  } else {
    c.embed_dim = get_int(j, "embed_dim");
    c.token_dim = get_int(j, "token_dim");
    if (!j.contains("levels") || !j["levels"].is_array()) bad(origin, "levels must be an array");
    for (size_t i = 0; i < j["levels"].size(); ++i) {
      const json& lj = j["levels"][i];
      const std::string name = "levels[" + std::to_string(i) + "]";
      if (!lj.is_object()) bad(origin, name + " must be an object");
      LevelConfig lv;
      lv.chunk_len = get_int(lj, "chunk_len");
      const std::string chunker = get_string(lj, name + ".", "chunker");
      if (chunker == "concat")
        lv.chunker = ChunkerKind::Concat;
      else if (chunker == "linear")
        lv.chunker = ChunkerKind::Linear;
      else
        bad(origin, name + ".chunker must be \"concat\" or \"linear\"");
      lv.dim = get_int(lj, "dim");
      lv.prefix_len = get_int(lj, "prefix_len");
      if (!lj.contains("encoder") || !lj.contains("decoder"))
        bad(origin, name + " needs encoder and decoder");
      lv.encoder = stack_from_json(lj["encoder"], name + ".encoder", origin);
      lv.decoder = stack_from_json(lj["decoder"], name + ".decoder", origin);
      c.levels.push_back(lv);
    }
  }
  validate_with_origin(c, origin);
  return c;
}

std::string config_to_json(const ModelConfig& c) {
  json j;
  if (c.arch == Arch::Vanilla) {
    j = json{{"arch", "vanilla"},
             {"vocab_size", c.vocab_size},
             {"dim", c.dim},
             {"layers", c.stack.layers},
             {"heads", c.stack.heads},
             {"kv_heads", c.stack.kv_heads},
             {"head_dim", c.stack.head_dim},
             {"ffn_dim", c.stack.ffn_dim}};
  } else {
    json levels = json::array();
    for (const LevelConfig& lv : c.levels)
      levels.push_back(json{{"chunk_len", lv.chunk_len},
                            {"chunker", lv.chunker == ChunkerKind::Concat ? "concat" : "linear"},
                            {"dim", lv.dim},
                            {"prefix_len", lv.prefix_len},
                            {"encoder", stack_to_json(lv.encoder)},
                            {"decoder", stack_to_json(lv.decoder)}});
    j = json{{"arch", "photon"},
             {"vocab_size", c.vocab_size},
             {"embed_dim", c.embed_dim},
             {"token_dim", c.token_dim},
             {"levels", levels}};
  }
  // Floats are written with the digits that identify them (1e-05, not 9.99999974737875e-06).
  auto shortest = [](float v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", v);
    for (int digits = 1; digits <= 9; ++digits) {
      std::snprintf(text, sizeof text, "%.*g", digits, v);
      if (std::strtof(text, nullptr) == v) break;
    }
    return std::strtod(text, nullptr);
  };
  j["norm_eps"] = shortest(c.norm_eps);
  j["rope_theta"] = shortest(c.rope_theta);
  j["max_seq_len"] = c.max_seq_len;
  return j.dump();
}

int64_t TensorSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  if (c.arch == Arch::Vanilla) {
    t.push_back({"tok_emb", {c.vocab_size, c.dim}});
    add_stack(t, "", c.stack, c.dim);
    t.push_back({"lm_head", {c.vocab_size, c.dim}});
    return t;
  }
  const int L = c.num_levels();
  t.push_back({"tok_emb_enc", {c.vocab_size, c.embed_dim}});
  for (int l = 1; l <= L; ++l) {
    const LevelConfig& lv = c.level(l);
    const std::string p = "enc." + std::to_string(l) + ".";
    if (lv.chunker == ChunkerKind::Linear) {
      const int64_t width = int64_t{lv.chunk_len} * c.latent_dim(l - 1);
      t.push_back({p + "chunker.norm", {width}});
      t.push_back({p + "chunker.proj.weight", {lv.dim, width}});
      t.push_back({p + "chunker.proj.bias", {lv.dim}});
    }
    add_stack(t, p, lv.encoder, lv.dim);
  }
  t.push_back({"dec." + std::to_string(L) + ".start", {c.latent_dim(L)}});
  for (int l = L; l >= 1; --l) {
    const LevelConfig& lv = c.level(l);
    const std::string p = "dec." + std::to_string(l) + ".";
    const int64_t e = c.decoder_dim(l);
    t.push_back({p + "converter.weight", {int64_t{lv.prefix_len} * e, lv.dim}});
    t.push_back({p + "converter.bias", {int64_t{lv.prefix_len} * e}});
    add_stack(t, p, lv.decoder, e);
  }
  t.push_back({"tok_emb_dec", {c.vocab_size, c.token_dim}});
  t.push_back({"lm_head", {c.vocab_size, c.token_dim}});
  return t;
}

uint64_t parameter_count(const ModelConfig& c) {
  uint64_t n = 0;
  for (const TensorSpec& t : expected_tensors(c)) n += static_cast<uint64_t>(t.elements());
  return n;
}

bool find_preset(const std::string& name, ModelConfig* out) {
  auto it = presets().find(name);
  if (it == presets().end()) return false;
  *out = it->second;
  return true;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, config] : presets()) names.push_back(name);
  return names;
}

}  // namespace photon
