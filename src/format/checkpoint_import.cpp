#include "format/checkpoint_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include "core/json.h"
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "format/hf_config.h"
#include "format/model_schema.h"
#include "format/safetensors.h"
#include "format/sha256.h"
#include "tokenizer/tokenizer.h"

namespace photon {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

struct Location {
  const SafetensorsFile* file;
  const SafetensorsTensor* tensor;
};

// The weight files of a checkpoint, mapped, and where each tensor lies.
class Weights {
 public:
  // A directory (its model.safetensors.index.json and the shards it lists, else its
  // model.safetensors) or one .safetensors file.
  explicit Weights(const fs::path& path) {
    if (!fs::is_directory(path)) {
      open_file(path.string());
      label_ = path.string();
      return;
    }
    if (fs::exists(path / kIndexFile)) {
      open_shards(path, path / kIndexFile);
      label_ = (path / kIndexFile).string();
    } else if (fs::exists(path / kSingleFile)) {
      open_file((path / kSingleFile).string());
      label_ = (path / kSingleFile).string();
    } else {
      fail(PHOTON_ERR_IO, path.string() + ": no " + kSingleFile + " and no " + kIndexFile +
                              (fs::exists(path / "pytorch_model.bin")
                                   ? " (pytorch_model.bin is not read: save the model with "
                                     "safetensors)"
                                   : ""));
    }
  }

  const Location* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Location>& tensors() const { return tensors_; }
  // The file, or the index of the shards, for messages.
  const std::string& label() const { return label_; }

 private:
  const SafetensorsFile& open_file(const std::string& path) {
    files_.push_back(SafetensorsFile::open(path));
    const SafetensorsFile& file = *files_.back();
    for (const SafetensorsTensor& t : file.tensors()) tensors_[t.name] = {&file, &t};
    return file;
  }

  // Every shard the index names, each holding exactly the tensors the index maps to it.
  void open_shards(const fs::path& dir, const fs::path& index_path) {
    const std::string index_label = index_path.string();
    json index;
    try {
      index = json::parse(read_whole_file(index_label));
    } catch (const json::exception& e) {
      fail(PHOTON_ERR_CORRUPT, index_label + ": not valid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(PHOTON_ERR_CORRUPT, index_label + ": no \"weight_map\" object");
    std::map<std::string, std::string> shard_of;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      // A shard is a file of this directory, never a path that leads elsewhere.
      if (!shard.is_string() || shard.get<std::string>().empty() ||
          shard.get<std::string>().find_first_of(std::string("/\\\0", 3)) != std::string::npos ||
          shard.get<std::string>() == "." || shard.get<std::string>() == "..")
        fail(PHOTON_ERR_CORRUPT, index_label + ": weight_map maps '" + name + "' to " +
                                     shard.dump() + ", not a file name in " + dir.string());
      shard_of[name] = shard.get<std::string>();
    }
    std::set<std::string> shards;
    for (const auto& [name, shard] : shard_of) shards.insert(shard);
    for (const std::string& shard : shards) {
      const SafetensorsFile& file = open_file((dir / shard).string());
      for (const SafetensorsTensor& t : file.tensors()) {
        auto it = shard_of.find(t.name);
        if (it == shard_of.end())
          fail(PHOTON_ERR_TENSOR_SET,
               file.path() + ": tensor '" + t.name + "' is not in " + index_label);
        if (it->second != shard)
          fail(PHOTON_ERR_TENSOR_SET, file.path() + ": tensor '" + t.name + "' is here but " +
                                          index_label + " maps it to " + it->second);
      }
    }
    for (const auto& [name, shard] : shard_of)
      if (tensors_.count(name) == 0)
        fail(PHOTON_ERR_TENSOR_SET,
             index_label + ": maps tensor '" + name + "' to " + shard + ", which does not hold it");
  }

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> tensors_;
  std::string label_;
};

// The directory, or the file, by its own name ("TinyLlama-1.1B"), for the metadata.
std::string source_name(const fs::path& path) {
  fs::path p = path.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void add_if_absent(std::vector<std::pair<std::string, std::string>>& metadata,
                   const std::string& key, const std::string& value) {
  if (std::none_of(metadata.begin(), metadata.end(),
                   [&](const auto& entry) { return entry.first == key; }))
    metadata.emplace_back(key, value);
}

// The engine takes BOS and EOS from the tokenizer, so a config that names others is refused.
void check_token_id(const std::string& config_path, const char* field,
                    const std::optional<int32_t>& id, const std::string& tokenizer_origin,
                    const char* role, int32_t tokenizer_id) {
  if (!id || *id == tokenizer_id) return;
  fail(PHOTON_ERR_TOKENIZER,
       config_path + ": " + field + " is " + std::to_string(*id) + " but " + tokenizer_origin +
           (tokenizer_id < 0 ? std::string(" has no ") + role
                             : std::string("'s ") + role + " is " + std::to_string(tokenizer_id)));
}

}  // namespace

void convert_checkpoint(const CheckpointSource& source, const std::string& out_path,
                        const WriteOptions& options) {
  const fs::path path(source.path);
  std::error_code error;
  const bool is_directory = fs::is_directory(path, error);
  if (!is_directory && !fs::exists(path, error))
    fail(PHOTON_ERR_IO, source.path + ": no such file or directory");
  if (!is_directory && source.config_path.empty())
    fail(PHOTON_ERR_INVALID_ARGUMENT,
         source.path + ": a single .safetensors file needs its configuration given with it");
  const std::string config_path =
      source.config_path.empty() ? (path / "config.json").string() : source.config_path;
  const fs::path beside = is_directory ? path : path.parent_path();

  // The configuration.
  const std::string config_text = read_whole_file(config_path);
  const bool hf = is_hf_config(config_text, config_path);
  HfModel hf_model;
  ModelConfig config;
  if (hf) {
    hf_model = hf_config_from_json(config_text, config_path);
    config = hf_model.config;
  } else {
    config = config_from_json(config_text, config_path);
  }

  // The weights, matched to the tensors the configuration needs.
  const Weights weights(path);
  std::set<std::string> used;
  std::vector<WriteTensor> tensors;
  for (const TensorSpec& spec : expected_tensors(config)) {
    const std::string name = hf ? hf_tensor_name(spec.name, hf_model.tied_embeddings) : spec.name;
    const std::string also = hf ? " (the engine's '" + spec.name + "')" : "";
    const Location* at = weights.find(name);
    if (at == nullptr)
      fail(PHOTON_ERR_TENSOR_SET, weights.label() + ": tensor '" + name + "'" + also +
                                      " is missing (" + config_path + " needs shape " +
                                      shape_to_string(spec.shape) + ")");
    if (at->tensor->shape != spec.shape)
      fail(PHOTON_ERR_TENSOR_SHAPE, at->file->path() + ": tensor '" + name + "'" + also +
                                        " has shape " + shape_to_string(at->tensor->shape) +
                                        " but " + config_path + " needs " +
                                        shape_to_string(spec.shape));
    used.insert(name);
    tensors.push_back(
        {spec.name, spec.shape, [at](float* dst) { at->file->read_f32(*at->tensor, dst); }});
  }
  for (const auto& [name, at] : weights.tensors()) {
    if (used.count(name) != 0 || (hf && hf_derived_tensor(name))) continue;
    fail(PHOTON_ERR_TENSOR_SET,
         at.file->path() + ": tensor '" + name + "' is not used by " + config_path +
             (hf && name == "lm_head.weight"
                  ? " (tie_word_embeddings is true: the output layer is the embedding)"
                  : ""));
  }

  // The tokenizer, padded to the vocabulary, which the weights have bounded by now.
  std::string tokenizer_origin = source.tokenizer_path;
  if (tokenizer_origin.empty() && fs::exists(beside / "tokenizer.model"))
    tokenizer_origin = (beside / "tokenizer.model").string();
  if (tokenizer_origin.empty() && hf)
    fail(PHOTON_ERR_TOKENIZER,
         beside.string() +
             ": no tokenizer.model; a Hugging Face checkpoint is converted with its sentencepiece "
             "tokenizer.model (tokenizer.json alone is not supported)");
  const std::string tokenizer = pad_tokenizer_model(
      tokenizer_origin.empty() ? builtin_tokenizer_model() : read_whole_file(tokenizer_origin),
      config.vocab_size, tokenizer_origin.empty() ? "the built-in tokenizer" : tokenizer_origin);
  if (hf) {
    const Tokenizer parsed(tokenizer, tokenizer_origin);
    check_token_id(config_path, "bos_token_id", hf_model.bos_token_id, tokenizer_origin, "BOS",
                   parsed.bos());
    check_token_id(config_path, "eos_token_id", hf_model.eos_token_id, tokenizer_origin, "EOS",
                   parsed.eos());
  }

  WriteOptions with_source = options;
  add_if_absent(with_source.metadata, "source", source_name(path));
  add_if_absent(with_source.metadata, "source.format",
                hf ? "safetensors, Hugging Face " + hf_model.architecture
                   : std::string("safetensors, PHOTON"));
  add_if_absent(with_source.metadata, "source.config_sha256", sha256_hex(config_text));
  write_model_file(out_path, config, tokenizer, tensors, with_source);
}

}  // namespace photon
