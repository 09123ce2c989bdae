// Reading .photon model files: a size-prefixed FlatBuffers header (schemas/model.fbs) followed by
// an aligned raw data section. Everything a file claims is verified before use, with overflow-safe
// arithmetic, and every failure names the file (and the tensor, where one is at fault).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"

namespace photon {

// Newest format version this build reads and the one it writes.
constexpr uint32_t kModelFormatVersion = 1;
// FlatBuffers file identifier of model files.
constexpr char kModelFileIdentifier[] = "PHTN";
// Alignment of the data section and of every tensor inside it.
constexpr uint64_t kDataAlignment = 64;

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;            // from the start of the data section
  uint64_t size = 0;              // bytes
  const uint8_t* data = nullptr;  // into the mapping
};

// Progress in [0, 1]; returning false cancels (PHOTON_ERR_CANCELLED).
using ProgressFn = std::function<bool(float)>;

class ModelFile {
 public:
  // Maps and verifies `path`. Throws Error with one of PHOTON_ERR_IO, _BAD_IDENTIFIER,
  // _UNSUPPORTED_VERSION, _TRUNCATED, _CORRUPT, _SIZE_OVERFLOW, _TENSOR_BOUNDS, _TENSOR_SHAPE,
  // _TENSOR_SET, _BAD_CONFIG, _CANCELLED.
  static std::unique_ptr<ModelFile> open(const std::string& path, const ProgressFn& progress = {});
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t format_version() const { return format_version_; }
  const ModelConfig& config() const { return config_; }
  const std::string& tokenizer_model() const { return tokenizer_; }     // serialized sentencepiece
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // file order
  const TensorEntry* find(const std::string& name) const;
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_offset() const { return data_offset_; }
  // 64-bit FNV-1a of the data section (word-wise, see format/data_hash.h), recorded at write time
  // and not re-checked on open: with the config it fingerprints the model for saved sessions.
  uint64_t data_hash() const { return data_hash_; }

  // The full check of the data section that open() leaves out (photon_load_options_set_verify):
  // every weight is finite (Error PHOTON_ERR_NOT_FINITE naming the tensor and the first bad
  // element), then the section hashes to data_hash() (PHOTON_ERR_CORRUPT: changed since it was
  // written). Reads the whole file once.
  void verify_data() const;

 private:
  ModelFile() = default;
  std::string path_;
  uint32_t format_version_ = 0;
  ModelConfig config_;
  std::string tokenizer_;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::vector<std::pair<std::string, std::string>> metadata_;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_hash_ = 0;
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// Whether `path` is a regular file that starts as a model file does (its identifier in place);
// never throws.
bool is_model_file(const std::string& path);

// "[2, 5]": where element `flat` of a row-major tensor of `shape` lies (for messages).
std::string element_index(const std::vector<int64_t>& shape, uint64_t flat);

}  // namespace photon
