// Helpers shared by the format tests (test_model_file*.cpp, test_npz.cpp).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "format/model_writer.h"

namespace photon::test {

namespace fs = std::filesystem;

// Not a real sentencepiece model: the format only carries these bytes (NUL and 0xff included).
inline const std::string kTokenizer = [] {
  const char bytes[] = "stand-in tokenizer bytes\0\x01\xff";
  return std::string(bytes, sizeof bytes - 1);
}();

inline StackConfig tiny_stack() {
  return {1, 2, 1, 4, 12};
}

// Two levels so that both chunker kinds, converters and the start vector appear.
inline ModelConfig tiny_photon() {
  ModelConfig c;
  c.arch = Arch::Photon;
  c.vocab_size = 512;
  c.max_seq_len = 64;
  c.embed_dim = 4;
  c.token_dim = 8;
  c.levels.push_back({2, ChunkerKind::Concat, 8, 1, tiny_stack(), tiny_stack()});
  c.levels.push_back({2, ChunkerKind::Linear, 6, 2, tiny_stack(), tiny_stack()});
  return c;
}

inline ModelConfig tiny_vanilla() {
  ModelConfig c;
  c.arch = Arch::Vanilla;
  c.vocab_size = 40;
  c.max_seq_len = 128;
  c.norm_eps = 1e-6f;
  c.rope_theta = 500000.0f;
  c.dim = 8;
  c.stack = {2, 4, 2, 2, 16};
  return c;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "photon-format-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Distinct, deterministic values per tensor and element, with fractions that f16 and bf16 round.
inline float ramp_value(size_t tensor, size_t i) {
  return static_cast<float>(tensor + 1) * 0.01f + static_cast<float>(i % 251) * 0.001237f - 0.1f;
}

inline std::vector<WriteTensor> ramp_tensors(const ModelConfig& config) {
  std::vector<WriteTensor> out;
  const std::vector<TensorSpec> specs = expected_tensors(config);
  for (size_t k = 0; k < specs.size(); ++k) {
    const int64_t n = specs[k].elements();
    out.push_back({specs[k].name, specs[k].shape, [k, n](float* dst) {
                     for (int64_t i = 0; i < n; ++i) dst[i] = ramp_value(k, static_cast<size_t>(i));
                   }});
  }
  return out;
}

struct Failure {
  photon_status status = PHOTON_OK;
  std::string message;
};

inline Failure run(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  return {};
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace photon::test
