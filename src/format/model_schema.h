// Translation between the in-memory model description and the FlatBuffers header of
// schemas/model.fbs, shared by the reader, the writer and the tests (which craft damaged headers).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "format/model_file.h"
#include "model_generated.h"

namespace photon {

inline uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Everything the header of a model file records.
struct ModelHeader {
  uint32_t format_version = kModelFormatVersion;
  ModelConfig config;
  std::string tokenizer;
  std::vector<TensorEntry> tensors;  // `data` is not recorded
  uint64_t data_size = 0;
  uint64_t data_hash = 0;
  uint64_t data_alignment = kDataAlignment;
  std::vector<std::pair<std::string, std::string>> metadata;
};

// The size-prefixed FlatBuffer with identifier "PHTN". Every scalar is stored even when it equals
// its default, so the length depends only on the names, shapes, tokenizer and metadata: the writer
// reserves room for a header whose data_hash it learns only after streaming the data.
std::vector<uint8_t> serialize_header(const ModelHeader& header);

flatbuffers::Offset<fb::Config> build_config(flatbuffers::FlatBufferBuilder& builder,
                                             const ModelConfig& config);
// Reads the configuration without validating it; enum values this build does not know throw
// Error(PHOTON_ERR_BAD_CONFIG) prefixed with `origin`.
ModelConfig config_from_fb(const fb::Config& config, const std::string& origin);

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace photon
