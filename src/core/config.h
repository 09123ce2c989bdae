// The model configuration of spec section 3.1 / 4 / 8, its validation, the tensor set it implies
// (spec section 6), exact parameter counts and the paper's presets (spec section 9).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace photon {

enum class Arch : uint8_t { Photon = 0, Vanilla = 1 };
enum class ChunkerKind : uint8_t { Concat = 0, Linear = 1 };

struct StackConfig {
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  bool operator==(const StackConfig&) const = default;
};

struct LevelConfig {
  int chunk_len = 0;  // C_l
  ChunkerKind chunker = ChunkerKind::Concat;
  int dim = 0;         // D_l
  int prefix_len = 0;  // R_l
  StackConfig encoder;
  StackConfig decoder;
  bool operator==(const LevelConfig&) const = default;
};

struct ModelConfig {
  Arch arch = Arch::Photon;
  int vocab_size = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int max_seq_len = 0;
  // photon
  int embed_dim = 0;  // D_e = D_0
  int token_dim = 0;  // D_t = E_1
  std::vector<LevelConfig> levels;
  // vanilla
  int dim = 0;
  StackConfig stack;

  int num_levels() const { return static_cast<int>(levels.size()); }
  const LevelConfig& level(int l) const { return levels[l - 1]; }  // 1-based, as in the spec
  int latent_dim(int l) const { return l == 0 ? embed_dim : level(l).dim; }       // D_l
  int decoder_dim(int l) const { return l == 1 ? token_dim : level(l - 1).dim; }  // E_l
  // B_l = C_1 ... C_l: tokens spanned by one level-l unit (B_0 = 1).
  int64_t block_tokens(int l) const;
  bool operator==(const ModelConfig&) const = default;
};

// Throws Error(PHOTON_ERR_BAD_CONFIG) naming the first violated constraint.
void validate_config(const ModelConfig& config);

// Parses the interchange JSON of spec section 8 and validates it. `origin` names the source in
// error messages (a file path, or "config").
ModelConfig config_from_json(const std::string& json, const std::string& origin);
// Compact JSON in the interchange format; config_from_json(config_to_json(c)) == c.
std::string config_to_json(const ModelConfig& config);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements() const;
};

// Every tensor the configuration needs, in a fixed order (spec section 6).
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);
uint64_t parameter_count(const ModelConfig& config);

// The paper's models of spec section 9 (photon-600m ... vanilla-1.2b) plus small presets for tests
// and CPU benchmarks. Returns false for an unknown name.
bool find_preset(const std::string& name, ModelConfig* out);
std::vector<std::string> preset_names();

}  // namespace photon
