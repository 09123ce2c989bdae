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
#include "session_obj_generated.h"
#include "tokenizer/tokenizer.h"

namespace photon::hardening {

namespace {

namespace fbo = photon::fbobj;

constexpr size_t kAlignment = 64;  // the data alignment of model files
constexpr size_t kHashBytes = 8;   // the integrity hash after a session state

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

// ---- session states ---------------------------------------------------------------------------

fbo::SessionStateT unpack_state(const std::vector<uint8_t>& state) {
  fbo::SessionStateT st;
  fbo::GetSizePrefixedSessionState(state.data())->UnPackTo(&st);
  return st;
}

// The object API drops empty vectors, but a state's caches, windows and plans must be present
// even when empty; so these tables are packed here, keeping every vector they hold.
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

Offset<fbo::Cache> pack_cache(FlatBufferBuilder& b, const fbo::CacheT* c) {
  if (c == nullptr) return 0;
  const auto k = b.CreateVector(c->k), v = b.CreateVector(c->v);
  const auto k16 = b.CreateVector(c->k16), v16 = b.CreateVector(c->v16);
  return fbo::CreateCache(b, c->layers, c->kv_dim, c->capacity, c->len, k, v, k16, v16);
}

Offset<fbo::WindowState> pack_window(FlatBufferBuilder& b, const fbo::WindowStateT* w) {
  if (w == nullptr) return 0;
  const auto cache = pack_cache(b, w->cache.get());
  const auto outputs = b.CreateVector(w->outputs);
  return fbo::CreateWindowState(b, cache, outputs, w->n_outputs, w->consumed);
}

template <typename T, typename Pack>
auto pack_all(FlatBufferBuilder& b, const std::vector<std::unique_ptr<T>>& items, Pack pack) {
  std::vector<decltype(pack(b, items[0].get()))> offsets;
  for (const auto& item : items) offsets.push_back(pack(b, item.get()));
  return offsets.empty() ? 0 : b.CreateVector(offsets);
}

std::vector<uint8_t> pack_state(const fbo::SessionStateT& st) {
  FlatBufferBuilder b;
  const auto levels = pack_all(b, st.levels, [](FlatBufferBuilder& fbb, const fbo::LevelStateT* l) {
    const auto encoder = pack_cache(fbb, l->encoder.get());
    const auto pending = fbb.CreateVector(l->pending);
    const auto window = pack_window(fbb, l->window.get());
    return fbo::CreateLevelState(fbb, encoder, pending, l->n_pending, window);
  });
  const auto plans = pack_all(b, st.plans, [](FlatBufferBuilder& fbb, const fbo::PlanT* p) {
    return fbo::CreatePlan(fbb, fbb.CreateVector(p->values));
  });
  const auto group = pack_all(b, st.group, pack_window);
  const auto config_json = st.config_json.empty() ? 0 : b.CreateString(st.config_json);
  const auto tokens = st.tokens.empty() ? 0 : b.CreateVector(st.tokens);
  const auto sampler = st.sampler ? fbo::Sampler::Pack(b, st.sampler.get()) : 0;
  const auto utf8_pending = b.CreateVector(st.utf8_pending);
  const auto recent_text = b.CreateString(st.recent_text);
  const auto top_last = b.CreateVector(st.top_last);
  const auto top = pack_cache(b, st.top.get());
  const auto cache = pack_cache(b, st.cache.get());
  const auto hidden = b.CreateVector(st.hidden);
  const auto root = fbo::CreateSessionState(
      b, st.format_version, st.model_hash, config_json, st.tokenizer_hash, st.kind,
      st.context_length, tokens, st.consumed, sampler, utf8_pending, recent_text, levels, top_last,
      st.has_top, top, plans, group, st.group_start, st.generated, cache, hidden, st.kv_type);
  fbo::FinishSizePrefixedSessionStateBuffer(b, root);
  std::vector<uint8_t> state(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  state.resize(state.size() + kHashBytes);
  rehash_state(state);
  return state;
}

class StateCases {
 public:
  explicit StateCases(const StateBases& bases) : bases_(bases) {}

  enum Base { kHier, kRec, kVanilla };

  void edit(Base base, const std::string& field, const std::string& damage,
            const std::function<void(fbo::SessionStateT&)>& change, photon_status status,
            const std::string& message) {
    fbo::SessionStateT st = unpack_state(bytes_of(base));
    change(st);
    cases.push_back({field, damage, pack_state(st), status, message, model_of(base)});
  }
  void raw(Base base, const std::string& field, const std::string& damage,
           const std::function<void(std::vector<uint8_t>&)>& change, photon_status status,
           const std::string& message) {
    std::vector<uint8_t> bytes = bytes_of(base);
    change(bytes);
    cases.push_back({field, damage, std::move(bytes), status, message, model_of(base)});
  }

  std::vector<DamageCase> cases;

 private:
  const std::vector<uint8_t>& bytes_of(Base base) const {
    return base == kHier ? bases_.hiergen : base == kRec ? bases_.recgen : bases_.vanilla;
  }
  static int model_of(Base base) { return base == kVanilla ? kVanillaModel : kPhotonModel; }
  const StateBases& bases_;
};

using S = fbo::SessionStateT;
constexpr photon_status kCorrupt = PHOTON_ERR_CORRUPT;

void add_framing_cases(StateCases& s) {
  const auto hier = StateCases::kHier;
  s.raw(
      hier, "file.size", "empty", [](auto& b) { b.clear(); }, PHOTON_ERR_TRUNCATED,
      "is too short to be a session state");
  s.raw(
      hier, "file.identifier", "PHSX instead of PHSS", [](auto& b) { b[11] = 'X'; },
      PHOTON_ERR_BAD_IDENTIFIER, "not a PHOTON session state");
  s.raw(
      hier, "file.size", "the last byte cut off", [](auto& b) { b.pop_back(); },
      PHOTON_ERR_TRUNCATED, "truncated (");
  s.raw(
      hier, "file.size", "a byte appended", [](auto& b) { b.push_back(0); }, kCorrupt,
      "1 unexpected bytes after the state");
  s.raw(
      hier, "file.hash", "a byte of the state changed, hash kept",
      [](auto& b) { b[b.size() / 2] ^= 0x10; }, kCorrupt, "the integrity hash does not match");
  s.raw(
      hier, "file.root_offset", "points past the state (hash updated)",
      [](auto& b) {
        put_le32(b.data() + 4, 0x7ffffff0);
        rehash_state(b);
      },
      kCorrupt, "the FlatBuffers verifier rejected the state");
}

void add_common_cases(StateCases& s) {
  const auto hier = StateCases::kHier;
  s.edit(
      hier, "SessionState.format_version", "0", [](S& st) { st.format_version = 0; }, kCorrupt,
      "format version 0 is invalid");
  s.edit(
      hier, "SessionState.format_version", "3 (newer)", [](S& st) { st.format_version = 3; },
      PHOTON_ERR_UNSUPPORTED_VERSION, "format version 3 is newer");
  const std::string other_model = "it was saved with a different model or tokenizer";
  s.edit(
      hier, "SessionState.model_hash", "changed", [](S& st) { st.model_hash ^= 1; },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      hier, "SessionState.config_json", "absent", [](S& st) { st.config_json.clear(); },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      hier, "SessionState.tokenizer_hash", "changed", [](S& st) { st.tokenizer_hash ^= 1; },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      hier, "SessionState.kind", "9", [](S& st) { st.kind = static_cast<fbo::SessionKind>(9); },
      kCorrupt, "unknown session kind");
  s.edit(
      hier, "SessionState.kind", "vanilla for a PHOTON model",
      [](S& st) { st.kind = fbo::SessionKind::Vanilla; }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      hier, "SessionState.context_length", "0", [](S& st) { st.context_length = 0; }, kCorrupt,
      "the context length is out of range");
  s.edit(
      hier, "SessionState.context_length", "above the model's",
      [](S& st) { st.context_length = 65; }, kCorrupt, "the context length is out of range");
  s.edit(
      hier, "SessionState.tokens", "absent", [](S& st) { st.tokens.clear(); }, kCorrupt,
      "the token history is missing");
  s.edit(
      hier, "SessionState.tokens", "longer than the context",
      [](S& st) { st.tokens.resize(static_cast<size_t>(st.context_length) + 1, 5); }, kCorrupt,
      "the history is longer than the context");
  s.edit(
      hier, "SessionState.tokens", "an id equal to vocab_size", [](S& st) { st.tokens[1] = 320; },
      kCorrupt, "a token id is outside the vocabulary");
  s.edit(
      hier, "SessionState.tokens", "a negative id", [](S& st) { st.tokens[0] = -1; }, kCorrupt,
      "a token id is outside the vocabulary");
  s.edit(
      hier, "SessionState.consumed", "-1", [](S& st) { st.consumed = -1; }, kCorrupt,
      "the consumed count is invalid");
  s.edit(
      hier, "SessionState.consumed", "more than the history",
      [](S& st) { st.consumed = static_cast<int64_t>(st.tokens.size()) + 1; }, kCorrupt,
      "the consumed count is invalid");
  s.edit(
      hier, "SessionState.sampler", "absent", [](S& st) { st.sampler.reset(); }, kCorrupt,
      "the sampler settings are missing");
  const std::string range = "the sampler settings are out of range";
  s.edit(
      hier, "Sampler.temperature", "-1", [](S& st) { st.sampler->temperature = -1; }, kCorrupt,
      range);
  s.edit(
      hier, "Sampler.temperature", "NaN", [](S& st) { st.sampler->temperature = std::nanf(""); },
      kCorrupt, range);
  s.edit(
      hier, "Sampler.top_k", "-1", [](S& st) { st.sampler->top_k = -1; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.top_p", "0", [](S& st) { st.sampler->top_p = 0; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.top_p", "1.5", [](S& st) { st.sampler->top_p = 1.5f; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.min_p", "1", [](S& st) { st.sampler->min_p = 1; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.repetition_penalty", "0.5",
      [](S& st) { st.sampler->repetition_penalty = 0.5f; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.repetition_penalty", "infinite",
      [](S& st) { st.sampler->repetition_penalty = INFINITY; }, kCorrupt, range);
  s.edit(
      hier, "Sampler.repetition_last_n", "-1", [](S& st) { st.sampler->repetition_last_n = -1; },
      kCorrupt, range);
  s.edit(
      hier, "Sampler.seed", "any value", [](S& st) { st.sampler->seed = ~uint64_t{0}; }, PHOTON_OK,
      "");
  s.edit(
      hier, "Sampler.ignore_eos", "flipped",
      [](S& st) { st.sampler->ignore_eos = !st.sampler->ignore_eos; }, PHOTON_OK, "");
  s.edit(
      hier, "Sampler.stop_strings", "an empty string",
      [](S& st) {
        st.sampler->stop_strings = {"x", ""};
      },
      kCorrupt, "a stop string is empty");
  s.edit(
      hier, "SessionState.utf8_pending", "4 bytes",
      [](S& st) {
        st.utf8_pending = {0xf0, 0x9f, 0x98, 0x80};
      },
      kCorrupt, "the held-back UTF-8 bytes are too many");
  s.edit(
      hier, "SessionState.utf8_pending", "3 bytes that start no character",
      [](S& st) {
        st.utf8_pending = {0x41, 0xff, 0x80};
      },
      PHOTON_OK, "");
  // Only matched against stop strings; any text is a text the session could have produced.
  s.edit(
      hier, "SessionState.recent_text", "any bytes", [](S& st) { st.recent_text = "\xff\x00z"; },
      PHOTON_OK, "");
}

void add_hiergen_cases(StateCases& s) {
  const auto hier = StateCases::kHier;
  s.edit(
      hier, "SessionState.levels", "one level missing", [](S& st) { st.levels.pop_back(); },
      kCorrupt, "the level states are missing");
  s.edit(
      hier, "LevelState.encoder", "absent", [](S& st) { st.levels[0]->encoder.reset(); }, kCorrupt,
      "level 1 encoder cache is missing");
  s.edit(
      hier, "Cache.layers", "2", [](S& st) { st.levels[0]->encoder->layers = 2; }, kCorrupt,
      "level 1 encoder cache has the wrong shape");
  s.edit(
      hier, "Cache.kv_dim", "+1", [](S& st) { st.levels[1]->encoder->kv_dim += 1; }, kCorrupt,
      "level 2 encoder cache has the wrong shape");
  s.edit(
      hier, "Cache.capacity", "+1", [](S& st) { st.levels[0]->encoder->capacity += 1; }, kCorrupt,
      "level 1 encoder cache has the wrong shape");
  s.edit(
      hier, "Cache.len", "above the capacity",
      [](S& st) { st.levels[0]->encoder->len = st.levels[0]->encoder->capacity + 1; }, kCorrupt,
      "level 1 encoder cache holds more positions than its capacity");
  s.edit(
      hier, "Cache.len", "one more than the history needs",
      [](S& st) { st.levels[0]->encoder->len += 1; }, kCorrupt, "positions, expected");
  s.edit(
      hier, "Cache.k", "one value too many", [](S& st) { st.levels[0]->encoder->k.push_back(0); },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      hier, "Cache.v", "a single value",
      [](S& st) {
        st.levels[1]->encoder->v.clear();
        st.levels[1]->encoder->v.push_back(0);
      },
      kCorrupt, "level 2 encoder cache has the wrong size");
  s.edit(
      hier, "LevelState.pending", "one value too many",
      [](S& st) { st.levels[0]->pending.push_back(0); }, kCorrupt,
      "level 1 pending children have the wrong size");
  s.edit(
      hier, "LevelState.n_pending", "+1", [](S& st) { st.levels[1]->n_pending += 1; }, kCorrupt,
      "level 2 has the wrong number of pending children");
  s.edit(
      hier, "LevelState.window", "absent", [](S& st) { st.levels[1]->window.reset(); }, kCorrupt,
      "level 2 window is missing");
  s.edit(
      hier, "WindowState.n_outputs", "above chunk_len",
      [](S& st) { st.levels[0]->window->n_outputs = 3; }, kCorrupt,
      "level 1 window has an invalid output count");
  s.edit(
      hier, "WindowState.consumed", "-1", [](S& st) { st.levels[0]->window->consumed = -1; },
      kCorrupt, "level 1 window has an invalid child count");
  s.edit(
      hier, "WindowState.cache", "absent", [](S& st) { st.levels[0]->window->cache.reset(); },
      kCorrupt, "level 1 window cache is missing");
  s.edit(
      hier, "WindowState.outputs", "one value too many",
      [](S& st) { st.levels[1]->window->outputs.push_back(0); }, kCorrupt,
      "level 2 window outputs have the wrong size");
  s.edit(
      hier, "SessionState.top_last", "one value too many", [](S& st) { st.top_last.push_back(0); },
      kCorrupt, "the last top-level state has the wrong size");
  s.edit(
      hier, "SessionState.has_top", "flipped", [](S& st) { st.has_top = !st.has_top; }, kCorrupt,
      "the top-level flag does not match the history");
}

void add_recgen_cases(StateCases& s) {
  const auto rec = StateCases::kRec;
  s.edit(
      rec, "SessionState.consumed", "not the whole history (RecGen)",
      [](S& st) { st.consumed -= 1; }, kCorrupt, "the consumed count is invalid");
  s.edit(
      rec, "SessionState.group_start", "not on a level-2 boundary",
      [](S& st) { st.group_start += 1; }, kCorrupt, "the open unit does not match the history");
  s.edit(
      rec, "SessionState.group_start", "past the history", [](S& st) { st.group_start += 4; },
      kCorrupt, "the open unit does not match the history");
  s.edit(
      rec, "SessionState.top", "absent", [](S& st) { st.top.reset(); }, kCorrupt,
      "the top-level cache is missing");
  s.edit(
      rec, "Cache.len", "one more than the history needs (RecGen top)",
      [](S& st) { st.top->len += 1; }, kCorrupt, "the top-level cache holds");
  s.edit(
      rec, "SessionState.top_last", "one value too many (RecGen)",
      [](S& st) { st.top_last.push_back(0); }, kCorrupt,
      "the last top-level state has the wrong size");
  s.edit(
      rec, "SessionState.plans", "one plan missing", [](S& st) { st.plans.pop_back(); }, kCorrupt,
      "the plans are missing");
  s.edit(
      rec, "Plan.values", "one value too many", [](S& st) { st.plans[2]->values.push_back(0); },
      kCorrupt, "the plan of level 2 has the wrong size");
  s.edit(
      rec, "SessionState.group", "one window missing", [](S& st) { st.group.pop_back(); }, kCorrupt,
      "the level-1 windows are missing");
  s.edit(
      rec, "WindowState.n_outputs", "-1 (RecGen)", [](S& st) { st.group[0]->n_outputs = -1; },
      kCorrupt, "level-1 window 0 has an invalid output count");
  s.edit(
      rec, "WindowState.consumed", "above chunk_len (RecGen)",
      [](S& st) { st.group[1]->consumed = 3; }, kCorrupt,
      "level-1 window 1 has an invalid child count");
  s.edit(
      rec, "WindowState.n_outputs", "0 for a window that is open (RecGen)",
      [](S& st) {
        auto& w = *st.group[1];
        w.n_outputs = w.consumed = 0;
        w.outputs.clear();
        w.cache->len = 0;
        w.cache->k.clear();
        w.cache->v.clear();
      },
      kCorrupt, "level-1 window 1 does not match the history");
  s.edit(
      rec, "WindowState.outputs", "absent (RecGen)", [](S& st) { st.group[0]->outputs.clear(); },
      kCorrupt, "level-1 window 0 outputs have the wrong size");
  s.edit(
      rec, "SessionState.has_top", "flipped (RecGen)", [](S& st) { st.has_top = !st.has_top; },
      kCorrupt, "the top-level flag does not match the history");
  // Whether the session has generated only decides whether more prompt is refused.
  s.edit(
      rec, "SessionState.generated", "flipped", [](S& st) { st.generated = !st.generated; },
      PHOTON_OK, "");
}

// Every cache of the state in 16 bits, as a session with bf16 KV caches saves it (version 2).
void to_bf16(S& st) {
  auto narrow = [](fbo::CacheT* c) {
    if (c == nullptr) return;
    for (auto [from, to] : {std::pair{&c->k, &c->k16}, std::pair{&c->v, &c->v16}}) {
      to->resize(from->size());
      convert_from_f32(DType::BF16, from->data(), to->data(), from->size());
      from->clear();
    }
  };
  for (auto& level : st.levels) {
    narrow(level->encoder.get());
    if (level->window) narrow(level->window->cache.get());
  }
  for (auto& window : st.group) narrow(window->cache.get());
  narrow(st.top.get());
  narrow(st.cache.get());
  st.format_version = 2;
  st.kv_type = fbo::KvType::BF16;
}

void add_kv_type_cases(StateCases& s) {
  const auto hier = StateCases::kHier;
  const auto rec = StateCases::kRec;
  const auto van = StateCases::kVanilla;
  s.edit(hier, "SessionState.kv_type", "bf16, every cache in 16 bits", to_bf16, PHOTON_OK, "");
  s.edit(rec, "SessionState.kv_type", "bf16 (RecGen)", to_bf16, PHOTON_OK, "");
  s.edit(van, "SessionState.kv_type", "bf16 (vanilla)", to_bf16, PHOTON_OK, "");
  s.edit(
      hier, "SessionState.kv_type", "9",
      [](S& st) {
        to_bf16(st);
        st.kv_type = static_cast<fbo::KvType>(9);
      },
      kCorrupt, "unknown KV cache type 9");
  s.edit(
      hier, "SessionState.kv_type", "bf16 in a version 1 state",
      [](S& st) {
        to_bf16(st);
        st.format_version = 1;
      },
      kCorrupt, "16-bit KV caches in a format version 1 state");
  s.edit(
      hier, "SessionState.kv_type", "bf16 over f32 caches",
      [](S& st) {
        st.format_version = 2;
        st.kv_type = fbo::KvType::BF16;
      },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      hier, "Cache.k16", "one value too many",
      [](S& st) {
        to_bf16(st);
        st.levels[0]->encoder->k16.push_back(0);
      },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      rec, "Cache.v16", "a single value (RecGen top)",
      [](S& st) {
        to_bf16(st);
        st.top->v16.assign(1, 0);
      },
      kCorrupt, "the top-level cache has the wrong size");
}

void add_vanilla_cases(StateCases& s) {
  const auto van = StateCases::kVanilla;
  s.edit(
      van, "SessionState.kind", "HierGen for a vanilla model",
      [](S& st) { st.kind = fbo::SessionKind::HierGen; }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      van, "SessionState.cache", "absent", [](S& st) { st.cache.reset(); }, kCorrupt,
      "the KV cache is missing");
  s.edit(
      van, "Cache.len", "one more than consumed (vanilla)", [](S& st) { st.cache->len += 1; },
      kCorrupt, "the KV cache holds");
  s.edit(
      van, "SessionState.hidden", "one value too many", [](S& st) { st.hidden.push_back(0); },
      kCorrupt, "the last hidden state has the wrong size");
}

std::vector<uint8_t> saved_state(photon_model* model, photon_mode mode, int prompt_len,
                                 int generate) {
  auto check = [](photon_status status, const char* what) {
    if (status != PHOTON_OK)
      throw std::runtime_error(std::string("base state: ") + what + ": " + photon_last_error());
  };
  photon_session_options* options = nullptr;
  check(photon_session_options_create(&options), "options");
  photon_session_options_set_mode(options, mode);
  photon_session_options_set_ignore_eos(options, 1);
  photon_session* session = nullptr;
  const photon_status created = photon_session_create(model, options, &session);
  photon_session_options_free(options);
  check(created, "create");
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(i == 0 ? 1 : 5 + (i * 37) % 300);
  std::vector<uint8_t> state;
  try {
    check(photon_session_prefill(session, prompt.data(), prompt.size()), "prefill");
    check(photon_session_generate(session, generate, nullptr, nullptr, nullptr), "generate");
    size_t size = 0;
    photon_session_save(session, nullptr, 0, &size);
    state.resize(size);
    check(photon_session_save(session, state.data(), state.size(), &size), "save");
  } catch (...) {
    photon_session_free(session);
    throw;
  }
  photon_session_free(session);
  return state;
}

}  // namespace

StateBases base_states(photon_model* photon, photon_model* vanilla) {
  StateBases bases;
  bases.hiergen = saved_state(photon, PHOTON_MODE_HIERGEN, 5, 2);
  bases.recgen = saved_state(photon, PHOTON_MODE_RECGEN, 5, 0);
  bases.vanilla = saved_state(vanilla, PHOTON_MODE_AUTO, 4, 1);
  return bases;
}

std::vector<DamageCase> damaged_model_files(const std::vector<uint8_t>& photon_file,
                                            const std::vector<uint8_t>& vanilla_file) {
  ModelCases m(photon_file, vanilla_file);
  add_file_cases(m);
  add_header_cases(m);
  add_content_cases(m);
  return std::move(m.cases);
}

std::vector<DamageCase> damaged_session_states(const StateBases& bases) {
  StateCases s(bases);
  add_framing_cases(s);
  add_common_cases(s);
  add_hiergen_cases(s);
  add_recgen_cases(s);
  add_vanilla_cases(s);
  add_kv_type_cases(s);
  return std::move(s.cases);
}

std::vector<uint8_t> rebuilt_state(const std::vector<uint8_t>& state) {
  return pack_state(unpack_state(state));
}

std::vector<uint8_t> rebuilt_model_file(const std::vector<uint8_t>& file) {
  const ModelParts parts = split_model(file);
  return join_model(parts.header, parts.data);
}

void rehash_state(std::vector<uint8_t>& state) {
  const size_t body = state.size() - kHashBytes;
  const uint64_t hash = hash_data_section(state.data(), body);
  for (size_t i = 0; i < kHashBytes; ++i) state[body + i] = static_cast<uint8_t>(hash >> (8 * i));
}

}  // namespace photon::hardening
