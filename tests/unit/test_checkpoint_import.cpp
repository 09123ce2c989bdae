// safetensors checkpoints -> .photon: the Hugging Face config mapping and every field it refuses,
// the tensor name mapping (checked value by value in the written file), sharded checkpoints and
// their index, the tokenizer rules, provenance metadata, and SHA-256 against known digests.
// (tests/import compares converted models with an independent PyTorch forward pass.)
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/checkpoint_import.h"
#include "format/hf_config.h"
#include "format/model_file.h"
#include "format/sha256.h"
#include "safetensors_util.h"
#include "test_model_file_util.h"
#include "tokenizer/tokenizer.h"

namespace photon {
namespace {

using namespace test;
using nlohmann::json;

const std::string kTinyTokenizer = std::string(PHOTON_SOURCE_DIR) + "/tests/data/tiny.model";

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Lengths around the one- and two-block padding boundaries (Python's hashlib gave the digests).
  const std::pair<size_t, const char*> cases[] = {
      {55, "576a1bf8d4478657e6dc4af9398544765c2a92cde28478b019235cfed315fc09"},
      {56, "9b20501dfd1d99161c257950f3444f3e49230c351c5c8e0943ef369f85f5205d"},
      {63, "30b345906b493f06f69444b6521113511c242f30e29840462950035043682f1e"},
      {64, "d8bc63b4fc1156e5e7d95a418b9bf54cd3174bedbc2db40f74895349b229b3c0"},
      {65, "1ee23b0fbcaecc1aff4a9e8f1645f35ab2c8e13609cd73b68df8b5e3f63ce073"},
      {119, "7a6589821178918ca8d9edaba5abfc1e9b2669564f4469b66885379c1530b2c8"},
      {120, "655250427d56b1b0eeb8497d21428704273458a01772d6881b65c0abac0f8a98"}};
  for (const auto& [n, digest] : cases) {
    std::string bytes;
    for (size_t i = 0; i < n; ++i) bytes += static_cast<char>((i * 7) % 256);
    EXPECT_EQ(sha256_hex(bytes), digest) << n;
  }
}

// ---- the config mapping -------------------------------------------------------------------------

json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"vocab_size", 320},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"hidden_act", "silu"},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

Failure hf_failure(const json& config) {
  return run([&] { hf_config_from_json(config.dump(), "dir/config.json"); });
}

TEST(HfConfig, MapsLlamaToVanilla) {
  const HfModel m = hf_config_from_json(llama_config().dump(), "config.json");
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.config.arch, Arch::Vanilla);
  EXPECT_EQ(m.config.vocab_size, 320);
  EXPECT_EQ(m.config.dim, 8);
  EXPECT_EQ(m.config.stack, (StackConfig{2, 2, 1, 4, 12}));
  EXPECT_EQ(m.config.max_seq_len, 64);
  EXPECT_EQ(m.config.norm_eps, 1e-5f);
  EXPECT_EQ(m.config.rope_theta, 500000.0f);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.bos_token_id, 1);
  EXPECT_EQ(m.eos_token_id, 2);
}

TEST(HfConfig, DefaultsAreTransformers) {
  json c = llama_config();
  for (const char* key :
       {"num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
        "hidden_act", "bos_token_id", "eos_token_id", "tie_word_embeddings"})
    c.erase(key);
  c["head_dim"] = nullptr;  // null reads as not given
  const HfModel m = hf_config_from_json(c.dump(), "config.json");
  EXPECT_EQ(m.config.stack.kv_heads, 2);  // = num_attention_heads
  EXPECT_EQ(m.config.stack.head_dim, 4);  // hidden_size / num_attention_heads
  EXPECT_EQ(m.config.max_seq_len, 2048);
  EXPECT_EQ(m.config.norm_eps, 1e-6f);
  EXPECT_EQ(m.config.rope_theta, 10000.0f);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.bos_token_id.has_value());

  // head_dim given: heads * head_dim need not be hidden_size.
  c["head_dim"] = 6;
  EXPECT_EQ(hf_config_from_json(c.dump(), "config.json").config.stack.q_dim(), 12);
  // The newer rope_parameters carry rope_theta; a default rope_scaling is plain RoPE.
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  c["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(hf_config_from_json(c.dump(), "config.json").config.rope_theta, 1e6f);
  // Only model_type, and a one-element eos list.
  c.erase("architectures");
  c["eos_token_id"] = {2};
  EXPECT_EQ(hf_config_from_json(c.dump(), "config.json").eos_token_id, 2);
}

TEST(HfConfig, MistralWindowsThatCoverTheContext) {
  json c = llama_config();
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["sliding_window"] = nullptr;
  EXPECT_EQ(hf_config_from_json(c.dump(), "config.json").architecture, "MistralForCausalLM");
  c["sliding_window"] = 64;  // = max_position_embeddings: every position sees the whole context
  EXPECT_EQ(hf_config_from_json(c.dump(), "config.json").config.max_seq_len, 64);
  c.erase("num_key_value_heads");  // MistralConfig's default is 8, which 2 heads cannot group
  EXPECT_NE(hf_failure(c).message.find("num_key_value_heads (8)"), std::string::npos);
}

struct Refusal {
  const char* name;
  std::function<void(json&)> change;
  photon_status status;
  const char* message;
};

TEST(HfConfig, RefusesWhatTheEngineCannotRun) {
  auto mistral = [](json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
  };
  const Refusal cases[] = {
      {"rope_scaling",
       [](json& c) {
         c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       PHOTON_ERR_UNSUPPORTED, "rope_scaling of type \"linear\" is not supported"},
      {"rope_scaling llama3",
       [](json& c) {
         c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
       },
       PHOTON_ERR_UNSUPPORTED, "rope_scaling of type \"llama3\""},
      {"rope_parameters",
       [](json& c) {
         c["rope_parameters"] = {{"rope_type", "yarn"}};
       },
       PHOTON_ERR_UNSUPPORTED, "rope_parameters of type \"yarn\""},
      {"sliding_window",
       [&](json& c) {
         mistral(c);
         c["sliding_window"] = 16;
       },
       PHOTON_ERR_UNSUPPORTED,
       "sliding_window 16 is shorter than the context (max_position_embeddings 64)"},
      {"sliding_window default",
       [&](json& c) {
         mistral(c);
         c.erase("max_position_embeddings");
       },
       PHOTON_ERR_UNSUPPORTED,
       "sliding_window 4096 is shorter than the context (max_position_embeddings 131072)"},
      {"attention_bias", [](json& c) { c["attention_bias"] = true; }, PHOTON_ERR_UNSUPPORTED,
       "attention_bias is true"},
      {"mlp_bias", [](json& c) { c["mlp_bias"] = true; }, PHOTON_ERR_UNSUPPORTED,
       "mlp_bias is true"},
      {"hidden_act", [](json& c) { c["hidden_act"] = "gelu_pytorch_tanh"; }, PHOTON_ERR_UNSUPPORTED,
       "hidden_act \"gelu_pytorch_tanh\" is not supported"},
      {"quantization_config",
       [](json& c) {
         c["quantization_config"] = {{"bits", 4}};
       },
       PHOTON_ERR_UNSUPPORTED, "quantization_config"},
      {"partial_rotary_factor", [](json& c) { c["partial_rotary_factor"] = 0.5; },
       PHOTON_ERR_UNSUPPORTED, "partial_rotary_factor"},
      {"architectures", [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; },
       PHOTON_ERR_UNSUPPORTED, "architectures names \"GPT2LMHeadModel\""},
      {"two architectures",
       [](json& c) {
         c["architectures"] = {"LlamaForCausalLM", "MistralForCausalLM"};
       },
       PHOTON_ERR_UNSUPPORTED, "architectures must name one architecture"},
      {"model_type",
       [](json& c) {
         c.erase("architectures");
         c["model_type"] = "qwen2";
       },
       PHOTON_ERR_UNSUPPORTED, "model_type \"qwen2\" is not supported"},
      {"eos list",
       [](json& c) {
         c["eos_token_id"] = {2, 7};
       },
       PHOTON_ERR_UNSUPPORTED, "eos_token_id lists 2 tokens"},
      {"missing hidden_size", [](json& c) { c.erase("hidden_size"); }, PHOTON_ERR_BAD_CONFIG,
       "hidden_size is missing"},
      {"zero layers", [](json& c) { c["num_hidden_layers"] = 0; }, PHOTON_ERR_BAD_CONFIG,
       "num_hidden_layers must be a positive 32-bit integer, got 0"},
      {"float heads", [](json& c) { c["num_attention_heads"] = 2.5; }, PHOTON_ERR_BAD_CONFIG,
       "num_attention_heads must be an integer"},
      {"kv heads", [](json& c) { c["num_key_value_heads"] = 3; }, PHOTON_ERR_BAD_CONFIG,
       "num_key_value_heads (3) must divide num_attention_heads (2)"},
      {"odd head_dim", [](json& c) { c["head_dim"] = 3; }, PHOTON_ERR_BAD_CONFIG,
       "the vanilla configuration it maps to is invalid"},
      {"eps type", [](json& c) { c["rms_norm_eps"] = "small"; }, PHOTON_ERR_BAD_CONFIG,
       "rms_norm_eps must be a number"},
      {"tie type", [](json& c) { c["tie_word_embeddings"] = "yes"; }, PHOTON_ERR_BAD_CONFIG,
       "tie_word_embeddings must be true or false"},
      {"bos type", [](json& c) { c["bos_token_id"] = -1; }, PHOTON_ERR_BAD_CONFIG,
       "bos_token_id must be a token id"},
  };
  for (const Refusal& r : cases) {
    json c = llama_config();
    r.change(c);
    const Failure f = hf_failure(c);
    EXPECT_EQ(f.status, r.status) << r.name << ": " << f.message;
    EXPECT_NE(f.message.find(r.message), std::string::npos) << r.name << ": " << f.message;
    EXPECT_EQ(f.message.rfind("dir/config.json: ", 0), 0u) << r.name << ": " << f.message;
  }
}

TEST(HfConfig, TellsTheTwoConfigurationsApart) {
  EXPECT_TRUE(is_hf_config(llama_config().dump(), "c"));
  EXPECT_FALSE(is_hf_config(R"({"arch": "vanilla"})", "c"));
  Failure f = run([] { is_hf_config(R"({"dim": 8})", "x/config.json"); });
  EXPECT_EQ(f.status, PHOTON_ERR_BAD_CONFIG);
  EXPECT_NE(f.message.find("x/config.json: neither a PHOTON configuration"), std::string::npos)
      << f.message;
  f = run([] { is_hf_config("[1]", "x/config.json"); });
  EXPECT_EQ(f.status, PHOTON_ERR_BAD_CONFIG);
  f = run([] { is_hf_config("{", "x/config.json"); });
  EXPECT_NE(f.message.find("not valid JSON"), std::string::npos) << f.message;
}

TEST(HfConfig, TensorNames) {
  EXPECT_EQ(hf_tensor_name("tok_emb", false), "model.embed_tokens.weight");
  EXPECT_EQ(hf_tensor_name("lm_head", false), "lm_head.weight");
  EXPECT_EQ(hf_tensor_name("lm_head", true), "model.embed_tokens.weight");
  EXPECT_EQ(hf_tensor_name("norm", false), "model.norm.weight");
  EXPECT_EQ(hf_tensor_name("layers.0.attn_norm", false), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("layers.11.attn.wq", false), "model.layers.11.self_attn.q_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.3.attn.wk", false), "model.layers.3.self_attn.k_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.3.attn.wv", false), "model.layers.3.self_attn.v_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.3.attn.wo", false), "model.layers.3.self_attn.o_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.ffn_norm", false),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.ffn.w_gate", false), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.ffn.w_up", false), "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.ffn.w_down", false), "model.layers.1.mlp.down_proj.weight");
  EXPECT_TRUE(hf_derived_tensor("model.layers.4.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(hf_derived_tensor("model.layers.4.self_attn.q_proj.weight"));
}

// ---- conversion -------------------------------------------------------------------------------

// A Hugging Face checkpoint of llama_config()'s shape, bf16, distinct values per tensor.
class HfCheckpoint : public testing::Test {
 protected:
  void SetUp() override {
    config_ = llama_config();
    const ModelConfig c = hf_config_from_json(config_.dump(), "config.json").config;
    float k = 0.0f;
    for (const TensorSpec& spec : expected_tensors(c)) {
      std::vector<float> v(static_cast<size_t>(spec.elements()));
      k += 1.0f;
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = k * 0.125f + static_cast<float>(i % 29) * 0.0625f - 1.0f;  // exact in bf16
      tensors_[hf_tensor_name(spec.name, false)] = v;
      shapes_[hf_tensor_name(spec.name, false)] = spec.shape;
    }
  }

  std::vector<StTensor> st_tensors(const std::vector<std::string>& names) const {
    std::vector<StTensor> out;
    for (const std::string& n : names)
      out.push_back(st_tensor(n, "BF16", shapes_.at(n), tensors_.at(n)));
    return out;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, v] : tensors_) out.push_back(name);
    return out;
  }

  // dir/config.json, dir/tokenizer.model and the tensors in `shards` files (1: model.safetensors).
  void write(int shards = 1) const {
    fs::create_directories(dir());
    std::ofstream(dir() + "/config.json") << config_.dump(1);
    fs::copy_file(kTinyTokenizer, dir() + "/tokenizer.model", fs::copy_options::overwrite_existing);
    const std::vector<std::string> all = names();
    if (shards == 1) {
      write_bytes(dir() + "/model.safetensors", st_file(st_tensors(all)));
      return;
    }
    json map = json::object();
    for (int s = 0; s < shards; ++s) {
      std::vector<std::string> part;
      for (size_t i = static_cast<size_t>(s); i < all.size(); i += static_cast<size_t>(shards))
        part.push_back(all[i]);
      const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" +
                               std::to_string(shards) + ".safetensors";
      write_bytes(dir() + "/" + file, st_file(st_tensors(part)));
      for (const std::string& n : part) map[n] = file;
    }
    std::ofstream(dir() + "/model.safetensors.index.json")
        << json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(1);
  }

  Failure convert(CheckpointSource source = {}) const {
    if (source.path.empty()) source.path = dir();
    return run([&] { convert_checkpoint(source, out(), WriteOptions{}); });
  }

  // Every tensor of the written file equals the checkpoint's tensor it maps from.
  void expect_same_values(bool tied) const {
    const auto file = ModelFile::open(out());
    ASSERT_EQ(file->config(), hf_config_from_json(config_.dump(), "c").config);
    for (const TensorEntry& e : file->tensors()) {
      const std::vector<float>& want = tensors_.at(hf_tensor_name(e.name, tied));
      ASSERT_EQ(e.dtype, DType::F32);
      ASSERT_EQ(e.size, want.size() * 4) << e.name;
      std::vector<float> got(want.size());
      std::memcpy(got.data(), e.data, e.size);
      EXPECT_EQ(got, want) << e.name;
    }
  }

  std::string dir() const { return tmp_.file("TinyLlama-test"); }
  std::string out() const { return tmp_.file("out.photon"); }

  TempDir tmp_;
  json config_;
  std::map<std::string, std::vector<float>> tensors_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

TEST_F(HfCheckpoint, ConvertsEveryTensorToItsName) {
  write();
  const Failure f = convert();
  ASSERT_EQ(f.status, PHOTON_OK) << f.message;
  expect_same_values(false);
  const auto file = ModelFile::open(out());
  std::map<std::string, std::string> meta(file->metadata().begin(), file->metadata().end());
  EXPECT_EQ(meta["source"], "TinyLlama-test");
  EXPECT_EQ(meta["source.format"], "safetensors, Hugging Face LlamaForCausalLM");
  EXPECT_EQ(meta["source.config_sha256"], sha256_hex(read_whole_file(dir() + "/config.json")));
  // The tokenizer is tests/data/tiny.model, padded to nothing: it has exactly 320 pieces.
  EXPECT_EQ(file->tokenizer_model(), read_whole_file(kTinyTokenizer));
}

TEST_F(HfCheckpoint, TiedEmbeddingsAndDerivedBuffers) {
  config_["tie_word_embeddings"] = true;
  tensors_.erase("lm_head.weight");
  tensors_["model.layers.0.self_attn.rotary_emb.inv_freq"] = {1.0f, 0.5f};
  shapes_["model.layers.0.self_attn.rotary_emb.inv_freq"] = {2};
  write();
  const Failure f = convert();
  ASSERT_EQ(f.status, PHOTON_OK) << f.message;
  tensors_.erase("model.layers.0.self_attn.rotary_emb.inv_freq");
  expect_same_values(true);
}

TEST_F(HfCheckpoint, Shards) {
  write(3);
  ASSERT_EQ(convert().status, PHOTON_OK);
  expect_same_values(false);
}

TEST_F(HfCheckpoint, ASingleFileWithItsConfig) {
  write();
  fs::rename(dir() + "/model.safetensors", tmp_.file("weights.safetensors"));
  fs::rename(dir() + "/config.json", tmp_.file("hf.json"));
  fs::rename(dir() + "/tokenizer.model", tmp_.file("tokenizer.model"));  // beside the file
  Failure f = convert({tmp_.file("weights.safetensors"), "", ""});
  EXPECT_EQ(f.status, PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_NE(f.message.find("needs its configuration"), std::string::npos) << f.message;
  f = convert({tmp_.file("weights.safetensors"), tmp_.file("hf.json"), ""});
  ASSERT_EQ(f.status, PHOTON_OK) << f.message;
  expect_same_values(false);
}

TEST_F(HfCheckpoint, MissingExtraAndMisshapenTensors) {
  auto check = [&](photon_status status, const std::vector<std::string>& words) {
    write();
    const Failure f = convert();
    EXPECT_EQ(f.status, status) << f.message;
    for (const std::string& w : words) EXPECT_NE(f.message.find(w), std::string::npos) << f.message;
    EXPECT_FALSE(fs::exists(out()));
  };
  const std::vector<float> saved = tensors_["model.layers.1.mlp.up_proj.weight"];
  tensors_.erase("model.layers.1.mlp.up_proj.weight");
  check(PHOTON_ERR_TENSOR_SET, {"model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight'",
                                "(the engine's 'layers.1.ffn.w_up') is missing", "[12, 8]"});
  tensors_["model.layers.1.mlp.up_proj.weight"] = saved;
  shapes_["model.layers.1.mlp.up_proj.weight"] = {8, 12};
  check(PHOTON_ERR_TENSOR_SHAPE,
        {"'model.layers.1.mlp.up_proj.weight'", "has shape [8, 12] but", "needs [12, 8]"});
  shapes_["model.layers.1.mlp.up_proj.weight"] = {12, 8};
  tensors_["model.layers.0.self_attn.q_proj.bias"] = std::vector<float>(8, 0.0f);
  shapes_["model.layers.0.self_attn.q_proj.bias"] = {8};
  check(PHOTON_ERR_TENSOR_SET, {"'model.layers.0.self_attn.q_proj.bias' is not used by"});
  tensors_.erase("model.layers.0.self_attn.q_proj.bias");
  config_["tie_word_embeddings"] = true;  // lm_head.weight is still there
  check(PHOTON_ERR_TENSOR_SET, {"'lm_head.weight' is not used", "tie_word_embeddings is true"});
}

TEST_F(HfCheckpoint, DamagedIndex) {
  write(2);
  const std::string index_path = dir() + "/model.safetensors.index.json";
  const json index = json::parse(read_whole_file(index_path));
  auto with_index = [&](const json& j) {
    std::ofstream(index_path) << j.dump();
    return convert();
  };
  json j = index;
  j["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors";
  Failure f = with_index(j);
  EXPECT_EQ(f.status, PHOTON_ERR_CORRUPT);
  EXPECT_NE(f.message.find("not a file name in"), std::string::npos) << f.message;
  j = index;
  j["weight_map"].erase("model.norm.weight");
  f = with_index(j);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET);
  EXPECT_NE(f.message.find("tensor 'model.norm.weight' is not in"), std::string::npos) << f.message;
  j = index;
  const std::string shard = j["weight_map"]["model.norm.weight"];
  const std::string other = shard.find("00001-of") != std::string::npos
                                ? "model-00002-of-00002.safetensors"
                                : "model-00001-of-00002.safetensors";
  j["weight_map"]["model.norm.weight"] = other;
  f = with_index(j);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET);
  EXPECT_NE(f.message.find("is here but"), std::string::npos) << f.message;
  j = index;
  j["weight_map"]["model.extra.weight"] = shard;
  f = with_index(j);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET);
  EXPECT_NE(
      f.message.find("maps tensor 'model.extra.weight' to " + shard + ", which does not hold"),
      std::string::npos)
      << f.message;
  j = index;
  j["weight_map"]["model.extra.weight"] = "model-00003-of-00003.safetensors";
  f = with_index(j);
  EXPECT_EQ(f.status, PHOTON_ERR_IO);
  EXPECT_NE(f.message.find("model-00003-of-00003.safetensors: cannot open"), std::string::npos)
      << f.message;
  f = with_index(json::array());
  EXPECT_EQ(f.status, PHOTON_ERR_CORRUPT);
  EXPECT_NE(f.message.find("no \"weight_map\" object"), std::string::npos) << f.message;
  std::ofstream(index_path) << "{\"weight_map\": ";
  f = convert();
  EXPECT_EQ(f.status, PHOTON_ERR_CORRUPT);
  EXPECT_NE(f.message.find("index.json: not valid JSON"), std::string::npos) << f.message;
}

TEST_F(HfCheckpoint, DirectoryWithoutWeights) {
  write();
  fs::remove(dir() + "/model.safetensors");
  std::ofstream(dir() + "/pytorch_model.bin") << "pickle";
  const Failure f = convert();
  EXPECT_EQ(f.status, PHOTON_ERR_IO);
  EXPECT_NE(f.message.find("no model.safetensors and no model.safetensors.index.json"),
            std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find("pytorch_model.bin is not read"), std::string::npos) << f.message;
  EXPECT_EQ(convert({tmp_.file("absent"), "", ""}).status, PHOTON_ERR_IO);
}

TEST_F(HfCheckpoint, Tokenizers) {
  write();
  fs::remove(dir() + "/tokenizer.model");
  Failure f = convert();
  EXPECT_EQ(f.status, PHOTON_ERR_TOKENIZER);
  EXPECT_NE(f.message.find("no tokenizer.model"), std::string::npos) << f.message;
  // One given explicitly is used instead.
  f = convert({dir(), "", kTinyTokenizer});
  EXPECT_EQ(f.status, PHOTON_OK) << f.message;

  config_["bos_token_id"] = 0;
  write();
  f = convert();
  EXPECT_EQ(f.status, PHOTON_ERR_TOKENIZER);
  EXPECT_NE(f.message.find("config.json: bos_token_id is 0 but"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("tokenizer.model's BOS is 1"), std::string::npos) << f.message;
  config_["bos_token_id"] = 1;
  config_["eos_token_id"] = 3;
  write();
  f = convert();
  EXPECT_EQ(f.status, PHOTON_ERR_TOKENIZER);
  EXPECT_NE(f.message.find("eos_token_id is 3 but"), std::string::npos) << f.message;

  // A tokenizer larger than the vocabulary.
  config_["eos_token_id"] = 2;
  config_["vocab_size"] = 300;
  tensors_["model.embed_tokens.weight"].resize(300 * 8);
  shapes_["model.embed_tokens.weight"] = {300, 8};
  tensors_["lm_head.weight"].resize(300 * 8);
  shapes_["lm_head.weight"] = {300, 8};
  write();
  EXPECT_EQ(convert().status, PHOTON_ERR_TOKENIZER);
}

// The SDK's own configuration (the trainer's output): tensors under the SDK's names, the
// built-in tokenizer when the directory has none.
TEST(SdkCheckpoint, ConvertsWithTheSdkNames) {
  TempDir tmp;
  ModelConfig config = tiny_photon();
  config.vocab_size = 4096;  // the built-in tokenizer's pieces
  const std::string dir = tmp.file("final");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_to_json(config);
  std::vector<StTensor> tensors;
  const std::vector<TensorSpec> specs = expected_tensors(config);
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<float> v(static_cast<size_t>(specs[k].elements()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = ramp_value(k, i);
    tensors.push_back(st_tensor(specs[k].name, "F32", specs[k].shape, v));
  }
  write_bytes(dir + "/model.safetensors", st_file(tensors));
  const std::string out = tmp.file("m.photon");
  convert_checkpoint({dir, "", ""}, out, WriteOptions{});
  const auto file = ModelFile::open(out);
  EXPECT_EQ(file->config(), config);
  EXPECT_EQ(file->tokenizer_model(), builtin_tokenizer_model());
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorEntry* e = file->find(specs[k].name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(std::memcmp(e->data, tensors[k].data.data(), tensors[k].data.size()), 0)
        << specs[k].name;
  }
  std::map<std::string, std::string> meta(file->metadata().begin(), file->metadata().end());
  EXPECT_EQ(meta["source.format"], "safetensors, PHOTON");
  EXPECT_EQ(meta["source"], "final");
}

}  // namespace
}  // namespace photon
