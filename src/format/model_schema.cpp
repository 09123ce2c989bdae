#include "format/model_schema.h"

#include "core/error.h"

namespace photon {

namespace {

flatbuffers::Offset<fb::Stack> build_stack(flatbuffers::FlatBufferBuilder& b,
                                           const StackConfig& s) {
  return fb::CreateStack(b, s.layers, s.heads, s.kv_heads, s.head_dim, s.ffn_dim);
}

StackConfig stack_from_fb(const fb::Stack* s) {
  if (s == nullptr) return {};  // all zero: refused by validate_config with the field's name
  return {s->layers(), s->heads(), s->kv_heads(), s->head_dim(), s->ffn_dim()};
}

}  // namespace

flatbuffers::Offset<fb::Config> build_config(flatbuffers::FlatBufferBuilder& b,
                                             const ModelConfig& c) {
  std::vector<flatbuffers::Offset<fb::Level>> levels;
  for (const LevelConfig& lv : c.levels) {
    const auto encoder = build_stack(b, lv.encoder);
    const auto decoder = build_stack(b, lv.decoder);
    levels.push_back(fb::CreateLevel(b, lv.chunk_len, static_cast<fb::Chunker>(lv.chunker), lv.dim,
                                     lv.prefix_len, encoder, decoder));
  }
  const auto levels_vector = b.CreateVector(levels);
  const auto stack = build_stack(b, c.stack);
  return fb::CreateConfig(b, static_cast<fb::Arch>(c.arch), c.vocab_size, c.norm_eps, c.rope_theta,
                          c.max_seq_len, c.embed_dim, c.token_dim, levels_vector, c.dim, stack);
}

ModelConfig config_from_fb(const fb::Config& f, const std::string& origin) {
  ModelConfig c;
  switch (f.arch()) {
    case fb::Arch::Photon: c.arch = Arch::Photon; break;
    case fb::Arch::Vanilla: c.arch = Arch::Vanilla; break;
    default:
      fail(PHOTON_ERR_BAD_CONFIG,
           origin + ": unknown arch value " + std::to_string(static_cast<int>(f.arch())));
  }
  c.vocab_size = f.vocab_size();
  c.norm_eps = f.norm_eps();
  c.rope_theta = f.rope_theta();
  c.max_seq_len = f.max_seq_len();
  c.embed_dim = f.embed_dim();
  c.token_dim = f.token_dim();
  if (f.levels() != nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < f.levels()->size(); ++i) {
      const fb::Level& lf = *f.levels()->Get(i);
      LevelConfig lv;
      lv.chunk_len = lf.chunk_len();
      switch (lf.chunker()) {
        case fb::Chunker::Concat: lv.chunker = ChunkerKind::Concat; break;
        case fb::Chunker::Linear: lv.chunker = ChunkerKind::Linear; break;
        default:
          fail(PHOTON_ERR_BAD_CONFIG, origin + ": levels[" + std::to_string(i) +
                                          "] has an unknown chunker value " +
                                          std::to_string(static_cast<int>(lf.chunker())));
      }
      lv.dim = lf.dim();
      lv.prefix_len = lf.prefix_len();
      lv.encoder = stack_from_fb(lf.encoder());
      lv.decoder = stack_from_fb(lf.decoder());
      c.levels.push_back(lv);
    }
  }
  c.dim = f.dim();
  c.stack = stack_from_fb(f.stack());
  return c;
}

std::vector<uint8_t> serialize_header(const ModelHeader& h) {
  flatbuffers::FlatBufferBuilder b(64 * 1024 + h.tokenizer.size());
  b.ForceDefaults(true);
  const auto config = build_config(b, h.config);
  const auto tokenizer =
      b.CreateVector(reinterpret_cast<const uint8_t*>(h.tokenizer.data()), h.tokenizer.size());
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  tensors.reserve(h.tensors.size());
  for (const TensorEntry& t : h.tensors) {
    const auto name = b.CreateString(t.name);
    const auto shape = b.CreateVector(t.shape);
    tensors.push_back(
        fb::CreateTensor(b, name, static_cast<fb::DType>(t.dtype), shape, t.offset, t.size));
  }
  const auto tensors_vector = b.CreateVector(tensors);
  std::vector<flatbuffers::Offset<fb::KeyValue>> metadata;
  for (const auto& [key, value] : h.metadata) {
    const auto key_string = b.CreateString(key);
    const auto value_string = b.CreateString(value);
    metadata.push_back(fb::CreateKeyValue(b, key_string, value_string));
  }
  const auto metadata_vector = b.CreateVector(metadata);
  const auto root = fb::CreateModel(b, h.format_version, config, tokenizer, tensors_vector,
                                    h.data_size, h.data_hash, h.data_alignment, metadata_vector);
  fb::FinishSizePrefixedModelBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace photon
