#include "tiny_models.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "format/model_writer.h"

namespace photon::hardening {

ModelConfig tiny_config(int levels) {
  ModelConfig c;
  c.vocab_size = kTinyVocab;
  c.max_seq_len = 64;
  if (levels == 0) {
    c.arch = Arch::Vanilla;
    c.dim = 8;
    c.stack = {1, 2, 1, 4, 12};
    return c;
  }
  c.arch = Arch::Photon;
  c.embed_dim = 4;
  c.token_dim = 8;
  const StackConfig stack{1, 2, 1, 4, 12};
  for (int l = 1; l <= levels; ++l) {
    LevelConfig lv;
    lv.chunk_len = 2;
    lv.chunker = l == 1 ? ChunkerKind::Concat : ChunkerKind::Linear;
    lv.dim = l == 1 ? 2 * c.embed_dim : 6;
    lv.prefix_len = l == 2 ? 1 : 2;
    lv.encoder = stack;
    lv.decoder = stack;
    c.levels.push_back(lv);
  }
  return c;
}

const std::string& tiny_tokenizer() {
  static const std::string model = [] {
    const std::vector<uint8_t> bytes = read_file(PHOTON_SOURCE_DIR "/tests/data/tiny.model");
    return std::string(bytes.begin(), bytes.end());
  }();
  return model;
}

void write_tiny_model(const std::string& path, const ModelConfig& config, DType dtype,
                      uint64_t seed) {
  std::vector<WriteTensor> tensors;
  uint64_t stream = seed;
  for (const TensorSpec& spec : expected_tensors(config)) {
    const uint64_t key = ++stream * 0x9e3779b97f4a7c15ull;
    const std::string name = spec.name;
    const int64_t n = spec.elements();
    const float fan_in = static_cast<float>(spec.shape.back());
    tensors.push_back(
        {name, spec.shape, [=](float* dst) {
           uint64_t s = key;
           const bool norm = name.ends_with("norm");
           const bool bias = name.ends_with("bias");
           const bool embedding = name.starts_with("tok_emb") || name.ends_with("start");
           const float scale = embedding ? 1.7f : std::sqrt(3.0f / fan_in);
           for (int64_t i = 0; i < n; ++i) {
             s ^= s >> 12, s ^= s << 25, s ^= s >> 27;  // xorshift64*
             const float u =
                 static_cast<float>((s * 0x2545f4914f6cdd1dull) >> 40) / 8388608.0f - 1.0f;
             dst[i] = norm ? 1.0f + 0.1f * u : bias ? 0.1f * u : scale * u;
           }
         }});
  }
  WriteOptions options;
  options.dtype = dtype;
  options.metadata = {{"created", "fixed"}};  // the same bytes on every run
  write_model_file(path, config, tiny_tokenizer(), tensors, options);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

TempDir::TempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "photon-hardening-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace photon::hardening
