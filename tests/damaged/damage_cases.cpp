#include "damage_cases.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include "core/dtype.h"
#include "format/data_hash.h"
#include "model_obj_generated.h"
#include "tokenizer/tokenizer.h"

namespace photon::hardening {

namespace {

namespace fbo = photon::fbobj;

constexpr size_t kAlignment = 64;  // the data alignment of model files

uint32_t le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void put_le32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}

// Makes a field of the table at byte `table` absent by zeroing its vtable slot (`slot` is the
// generated VT_ constant). Tables of equal layout share a vtable, so all of them lose the field.
void erase_field(std::vector<uint8_t>& bytes, size_t table, uint16_t slot) {
  int32_t to_vtable;
  std::memcpy(&to_vtable, bytes.data() + table, 4);
  const size_t vtable = table - static_cast<size_t>(static_cast<int64_t>(to_vtable));
  uint16_t vtable_size;
  std::memcpy(&vtable_size, bytes.data() + vtable, 2);
  if (slot + 2u > vtable_size) throw std::logic_error("erase_field: the field is already absent");
  bytes[vtable + slot] = bytes[vtable + slot + 1] = 0;
}

size_t offset_in(const std::vector<uint8_t>& bytes, const void* p) {
  return static_cast<size_t>(static_cast<const uint8_t*>(p) - bytes.data());
}

// ---- model files ------------------------------------------------------------------------------

struct ModelParts {
  fbo::ModelT header;
  std::vector<uint8_t> data;  // the data section, unchanged
};

ModelParts split_model(const std::vector<uint8_t>& file) {
  ModelParts parts;
  fbo::GetSizePrefixedModel(file.data())->UnPackTo(&parts.header);
  const size_t data_offset = (4 + le32(file.data()) + kAlignment - 1) / kAlignment * kAlignment;
  parts.data.assign(file.begin() + static_cast<std::ptrdiff_t>(data_offset), file.end());
  return parts;
}

std::vector<uint8_t> join_model(const fbo::ModelT& header, const std::vector<uint8_t>& data) {
  flatbuffers::FlatBufferBuilder builder;
  builder.ForceDefaults(true);
  fbo::FinishSizePrefixedModelBuffer(builder, fbo::Model::Pack(builder, &header));
  std::vector<uint8_t> file(builder.GetBufferPointer(),
                            builder.GetBufferPointer() + builder.GetSize());
  file.resize((file.size() + kAlignment - 1) / kAlignment * kAlignment, 0);
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

class ModelCases {
 public:
  ModelCases(const std::vector<uint8_t>& photon_file, const std::vector<uint8_t>& vanilla_file)
      : photon_(photon_file), vanilla_(vanilla_file) {}

  // A change of the decoded header; the data section stays as it was.
  void edit(const std::string& field, const std::string& damage,
            const std::function<void(fbo::ModelT&)>& change, photon_status status,
            const std::string& message, bool vanilla = false) {
    ModelParts parts = split_model(vanilla ? vanilla_ : photon_);
    change(parts.header);
    cases.push_back({field, damage, join_model(parts.header, parts.data), status, message});
  }
  // A change of the file's bytes.
  void raw(const std::string& field, const std::string& damage,
           const std::function<void(std::vector<uint8_t>&)>& change, photon_status status,
           const std::string& message) {
    std::vector<uint8_t> bytes = photon_;
    change(bytes);
    cases.push_back({field, damage, std::move(bytes), status, message});
  }

  std::vector<DamageCase> cases;

 private:
  const std::vector<uint8_t>& photon_;
  const std::vector<uint8_t>& vanilla_;
};

const fbo::Model& root_of(const std::vector<uint8_t>& file) {
  return *fbo::GetSizePrefixedModel(file.data());
}

void add_file_cases(ModelCases& m) {
  m.raw(
      "file.size", "empty file", [](auto& b) { b.clear(); }, PHOTON_ERR_TRUNCATED,
      "too short for a model header");
  m.raw(
      "file.size_prefix", "declares more bytes than the file has",
      [](auto& b) { put_le32(b.data(), static_cast<uint32_t>(b.size())); }, PHOTON_ERR_TRUNCATED,
      "the header declares");
  m.raw(
      "file.identifier", "PHTX instead of PHTN", [](auto& b) { b[11] = 'X'; },
      PHOTON_ERR_BAD_IDENTIFIER, "not a PHOTON model file");
  m.raw(
      "file.root_offset", "points past the header",
      [](auto& b) { put_le32(b.data() + 4, 0x7ffffff0); }, PHOTON_ERR_CORRUPT,
      "the FlatBuffers header failed verification");
  m.raw(
      "file.data", "the last 100 bytes cut off", [](auto& b) { b.resize(b.size() - 100); },
      PHOTON_ERR_TRUNCATED, "the data section ends at byte");
  m.raw(
      "file.data", "64 bytes appended", [](auto& b) { b.resize(b.size() + 64, 0); },
      PHOTON_ERR_CORRUPT, "unexpected bytes after the data section");
  m.raw(
      "Model.config", "absent (a required field)",
      [](auto& b) { erase_field(b, offset_in(b, &root_of(b)), fbo::Model::VT_CONFIG); },
      PHOTON_ERR_CORRUPT, "the FlatBuffers header failed verification");
  m.raw(
      "Tensor.name", "absent (a required field)",
      [](auto& b) {
        erase_field(b, offset_in(b, root_of(b).tensors()->Get(0)), fbo::Tensor::VT_NAME);
      },
      PHOTON_ERR_CORRUPT, "the FlatBuffers header failed verification");
  m.raw(
      "KeyValue.key", "absent (a required field)",
      [](auto& b) {
        erase_field(b, offset_in(b, root_of(b).metadata()->Get(0)), fbo::KeyValue::VT_KEY);
      },
      PHOTON_ERR_CORRUPT, "the FlatBuffers header failed verification");
  m.raw(
      "KeyValue.value", "absent (a required field)",
      [](auto& b) {
        erase_field(b, offset_in(b, root_of(b).metadata()->Get(0)), fbo::KeyValue::VT_VALUE);
      },
      PHOTON_ERR_CORRUPT, "the FlatBuffers header failed verification");
}

void add_header_cases(ModelCases& m) {
  using M = fbo::ModelT;
  const photon_status bad_config = PHOTON_ERR_BAD_CONFIG;
  m.edit(
      "Model.format_version", "0", [](M& h) { h.format_version = 0; }, PHOTON_ERR_CORRUPT,
      "format version 0 is invalid");
  m.edit(
      "Model.format_version", "2 (newer)", [](M& h) { h.format_version = 2; },
      PHOTON_ERR_UNSUPPORTED_VERSION, "written in format version 2");
  m.edit(
      "Config.arch", "7", [](M& h) { h.config->arch = static_cast<fbo::Arch>(7); }, bad_config,
      "unknown arch value 7");
  m.edit(
      "Config.vocab_size", "0", [](M& h) { h.config->vocab_size = 0; }, bad_config,
      "vocab_size must be in");
  m.edit(
      "Config.norm_eps", "NaN", [](M& h) { h.config->norm_eps = std::nanf(""); }, bad_config,
      "norm_eps must be in (0, 1)");
  m.edit(
      "Config.rope_theta", "1", [](M& h) { h.config->rope_theta = 1.0f; }, bad_config,
      "rope_theta must be in");
  m.edit(
      "Config.max_seq_len", "-1", [](M& h) { h.config->max_seq_len = -1; }, bad_config,
      "max_seq_len must be in");
  m.edit(
      "Config.embed_dim", "0", [](M& h) { h.config->embed_dim = 0; }, bad_config,
      "embed_dim must be in");
  m.edit(
      "Config.token_dim", "70000", [](M& h) { h.config->token_dim = 70000; }, bad_config,
      "token_dim must be in");
  m.edit(
      "Config.levels", "none", [](M& h) { h.config->levels.clear(); }, bad_config,
      "levels must hold 1..8 levels");
  m.edit(
      "Config.levels", "five levels of chunk_len 64",
      [](M& h) {
        auto& levels = h.config->levels;
        levels[0]->chunk_len = 64;
        levels[0]->dim = 64 * h.config->embed_dim;
        while (levels.size() < 5) levels.push_back(std::make_unique<fbo::LevelT>(*levels[1]));
        for (size_t i = 1; i < levels.size(); ++i) levels[i]->chunk_len = 64;
      },
      bad_config, "the product of chunk_len over levels is too large");
  m.edit(
      "Level.chunk_len", "65", [](M& h) { h.config->levels[0]->chunk_len = 65; }, bad_config,
      "levels[0].chunk_len must be in 2..64");
  m.edit(
      "Level.chunker", "5",
      [](M& h) { h.config->levels[1]->chunker = static_cast<fbo::Chunker>(5); }, bad_config,
      "levels[1] has an unknown chunker value 5");
  m.edit(
      "Level.dim", "not chunk_len * embed_dim for a concat chunker",
      [](M& h) { h.config->levels[0]->dim += 1; }, bad_config, "a concat chunker needs dim");
  m.edit(
      "Level.dim", "0", [](M& h) { h.config->levels[1]->dim = 0; }, bad_config,
      "levels[1].dim must be in");
  m.edit(
      "Level.prefix_len", "0", [](M& h) { h.config->levels[1]->prefix_len = 0; }, bad_config,
      "levels[1].prefix_len must be in");
  m.edit(
      "Level.encoder", "absent", [](M& h) { h.config->levels[0]->encoder.reset(); }, bad_config,
      "levels[0].encoder.layers must be in");
  m.edit(
      "Level.decoder", "absent", [](M& h) { h.config->levels[1]->decoder.reset(); }, bad_config,
      "levels[1].decoder.layers must be in");
  m.edit(
      "Stack.layers", "4097", [](M& h) { h.config->levels[0]->encoder->layers = 4097; }, bad_config,
      "levels[0].encoder.layers must be in");
  m.edit(
      "Stack.heads", "0", [](M& h) { h.config->levels[1]->decoder->heads = 0; }, bad_config,
      "levels[1].decoder.heads must be in");
  m.edit(
      "Stack.kv_heads", "3, not dividing 2 heads",
      [](M& h) { h.config->levels[0]->decoder->kv_heads = 3; }, bad_config,
      "levels[0].decoder.kv_heads must be >= 1 and divide heads");
  m.edit(
      "Stack.head_dim", "3 (odd)", [](M& h) { h.config->levels[0]->encoder->head_dim = 3; },
      bad_config, "levels[0].encoder.head_dim must be even");
  m.edit(
      "Stack.ffn_dim", "0", [](M& h) { h.config->levels[1]->encoder->ffn_dim = 0; }, bad_config,
      "levels[1].encoder.ffn_dim must be in");
  m.edit(
      "Config.dim", "0 (vanilla)", [](M& h) { h.config->dim = 0; }, bad_config,
      "dim must be in 1..65536", true);
  m.edit(
      "Config.stack", "absent (vanilla)", [](M& h) { h.config->stack.reset(); }, bad_config,
      "stack.layers must be in", true);
}

void add_content_cases(ModelCases& m) {
  using M = fbo::ModelT;
  m.edit(
      "Model.tokenizer", "absent", [](M& h) { h.tokenizer.clear(); }, PHOTON_ERR_TOKENIZER,
      "not a valid sentencepiece model");
  m.edit(
      "Model.tokenizer", "garbage bytes", [](M& h) { h.tokenizer.assign(40, 0xee); },
      PHOTON_ERR_TOKENIZER, "not a valid sentencepiece model");
  m.edit(
      "Model.tokenizer", "a valid tokenizer of another vocabulary size",
      [](M& h) {
        h.tokenizer.assign(builtin_tokenizer_model().begin(), builtin_tokenizer_model().end());
      },
      PHOTON_ERR_TOKENIZER, "pieces but vocab_size is");
  m.edit(
      "Model.tensors", "absent", [](M& h) { h.tensors.clear(); }, PHOTON_ERR_TENSOR_SET,
      "is missing");
  m.edit(
      "Model.tensors", "an extra tensor",
      [](M& h) {
        auto extra = std::make_unique<fbo::TensorT>(*h.tensors[1]);
        extra->name = "extra.weight";
        extra->shape = {0};  // empty, so that it overlaps nothing
        extra->size = 0;
        h.tensors.push_back(std::move(extra));
      },
      PHOTON_ERR_TENSOR_SET, "tensor 'extra.weight' is not used by the configuration");
  m.edit(
      "Model.tensors", "a tensor listed twice",
      [](M& h) { h.tensors.push_back(std::make_unique<fbo::TensorT>(*h.tensors[1])); },
      PHOTON_ERR_TENSOR_SET, "appears more than once");
  m.edit(
      "Tensor.name", "not a name the configuration uses",
      [](M& h) { h.tensors[0]->name = "tok_emb"; }, PHOTON_ERR_TENSOR_SET,
      "tensor 'tok_emb' is not used by the configuration");
  m.edit(
      "Tensor.dtype", "9", [](M& h) { h.tensors[0]->dtype = static_cast<fbo::DType>(9); },
      PHOTON_ERR_CORRUPT, "has unknown dtype value 9");
  m.edit(
      "Tensor.dtype", "q8 for rows of 4 values", [](M& h) { h.tensors[0]->dtype = fbo::DType::Q8; },
      PHOTON_ERR_TENSOR_SHAPE, "q8 rows hold whole blocks of 32");
  m.edit(
      "Tensor.dtype", "q8 with the size of f32 values",
      [](M& h) {
        // tok_emb_enc, 320 x 4 f32: 5,120 bytes; the same values as 40 x 32 q8 take 1,360.
        h.tensors[0]->dtype = fbo::DType::Q8;
        h.tensors[0]->shape = {40, 32};
      },
      PHOTON_ERR_TENSOR_SHAPE, "declares 5120 bytes but shape [40, 32] of q8 needs 1360");
  m.edit(
      "Tensor.shape", "absent (rank 0)", [](M& h) { h.tensors[0]->shape.clear(); },
      PHOTON_ERR_TENSOR_SHAPE, "has rank 0");
  m.edit(
      "Tensor.shape", "rank 5",
      [](M& h) {
        h.tensors[0]->shape.insert(h.tensors[0]->shape.begin(), {1, 1, 1});
      },
      PHOTON_ERR_TENSOR_SHAPE, "has rank 5");
  m.edit(
      "Tensor.shape", "a negative dimension",
      [](M& h) { h.tensors[0]->shape[0] = -h.tensors[0]->shape[0]; }, PHOTON_ERR_TENSOR_SHAPE,
      "has a negative dimension");
  m.edit(
      "Tensor.shape", "dimensions whose product overflows",
      [](M& h) {
        h.tensors[0]->shape = {int64_t{1} << 40, int64_t{1} << 40};
      },
      PHOTON_ERR_SIZE_OVERFLOW, "overflows 64-bit sizes");
  m.edit(
      "Tensor.shape", "the same bytes in another shape",
      [](M& h) { h.tensors[0]->shape = {h.tensors[0]->shape[0] * h.tensors[0]->shape[1]}; },
      PHOTON_ERR_TENSOR_SHAPE, "but the configuration needs");
  m.edit(
      "Tensor.size", "4 bytes less than its shape needs", [](M& h) { h.tensors[0]->size -= 4; },
      PHOTON_ERR_TENSOR_SHAPE, "bytes but shape");
  m.edit(
      "Tensor.offset", "the end of the data section",
      [](M& h) { h.tensors[0]->offset = h.data_size; }, PHOTON_ERR_TENSOR_BOUNDS,
      "of a data section of");
  m.edit(
      "Tensor.offset", "offset + size overflows",
      [](M& h) { h.tensors[0]->offset = std::numeric_limits<uint64_t>::max() - 63; },
      PHOTON_ERR_SIZE_OVERFLOW, "overflows 64 bits");
  m.edit(
      "Tensor.offset", "not 64-byte aligned", [](M& h) { h.tensors[1]->offset += 4; },
      PHOTON_ERR_CORRUPT, "-byte aligned");
  m.edit(
      "Tensor.offset", "overlapping another tensor",
      [](M& h) { h.tensors[2]->offset = h.tensors[1]->offset; }, PHOTON_ERR_CORRUPT,
      "overlaps tensor");
  m.edit(
      "Model.data_size", "64 more than the file holds", [](M& h) { h.data_size += 64; },
      PHOTON_ERR_TRUNCATED, "the data section ends at byte");
  m.edit(
      "Model.data_size", "64 less than the file holds", [](M& h) { h.data_size -= 64; },
      PHOTON_ERR_CORRUPT, "unexpected bytes after the data section");
  m.edit(
      "Model.data_size", "overflowing the file offset",
      [](M& h) { h.data_size = std::numeric_limits<uint64_t>::max() - 8; },
      PHOTON_ERR_SIZE_OVERFLOW, "overflows 64 bits");
  // The data hash fingerprints the model for saved sessions (a damaged one makes them refuse it,
  // see the state cases); reading a multi-GiB data section to check it would defeat the mapping.
  m.edit(
      "Model.data_hash", "changed", [](M& h) { h.data_hash ^= 1; }, PHOTON_OK, "");
  m.edit(
      "Model.data_alignment", "32", [](M& h) { h.data_alignment = 32; }, PHOTON_ERR_CORRUPT,
      "data alignment 32 is not supported");
  m.edit(
      "Model.metadata", "a key twice",
      [](M& h) { h.metadata.push_back(std::make_unique<fbo::KeyValueT>(*h.metadata[0])); },
      PHOTON_ERR_CORRUPT, "appears more than once");
  m.edit(
      "KeyValue.key", "empty", [](M& h) { h.metadata[0]->key.clear(); }, PHOTON_OK, "");
  m.edit(
      "KeyValue.value", "not UTF-8", [](M& h) { h.metadata[0]->value = "\xff\xfe"; }, PHOTON_OK,
      "");
}

}  // namespace

std::vector<DamageCase> damaged_model_files(const std::vector<uint8_t>& photon_file,
                                            const std::vector<uint8_t>& vanilla_file) {
  ModelCases m(photon_file, vanilla_file);
  add_file_cases(m);
  add_header_cases(m);
  add_content_cases(m);
  return std::move(m.cases);
}

std::vector<uint8_t> rebuilt_model_file(const std::vector<uint8_t>& file) {
  const ModelParts parts = split_model(file);
  return join_model(parts.header, parts.data);
}

}  // namespace photon::hardening
