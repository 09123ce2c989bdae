// Small random models for engine tests, with weights scaled like a trained network (1/sqrt(fan_in))
// so that distributions are peaked and greedy paths are stable under float rounding.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"
#include "format/model_writer.h"
#include "tokenizer/tokenizer.h"

namespace photon::testing {

#if defined(PHOTON_BINARY_DIR)
// A model file of this test process in the build folder: ctest runs each test in a process of its
// own, several at once, so a fixed name would let one test remove the file another is loading.
inline std::string scratch_model_path(const std::string& stem) {
  return std::string(PHOTON_BINARY_DIR) + "/" + stem + "." + std::to_string(::getpid()) + ".photon";
}
#endif

inline std::string read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline StackConfig tiny_stack(int layers, int heads, int kv_heads, int head_dim, int ffn) {
  return {layers, heads, kv_heads, head_dim, ffn};
}

// photon with L levels of chunk length `chunk` (level 1 concat, above linear) and GQA.
inline ModelConfig tiny_photon(int levels, int chunk = 2, int prefix = 2) {
  ModelConfig c;
  c.arch = Arch::Photon;
  c.vocab_size = 512;
  c.max_seq_len = 256;
  c.embed_dim = 16;
  c.token_dim = 24;
  for (int l = 1; l <= levels; ++l) {
    LevelConfig lv;
    lv.chunk_len = chunk + (l == 2 ? 1 : 0);
    lv.chunker = l == 1 ? ChunkerKind::Concat : ChunkerKind::Linear;
    lv.dim = l == 1 ? lv.chunk_len * c.embed_dim : 40;
    lv.prefix_len = l == 2 ? 1 : prefix;
    lv.encoder = tiny_stack(2, 4, 2, 8, 48);
    lv.decoder = tiny_stack(1, 4, 4, 6, 40);
    c.levels.push_back(lv);
  }
  return c;
}

inline ModelConfig tiny_vanilla() {
  ModelConfig c;
  c.arch = Arch::Vanilla;
  c.vocab_size = 512;
  c.max_seq_len = 256;
  c.dim = 32;
  c.stack = tiny_stack(2, 4, 2, 8, 64);
  return c;
}

// Writes `config` with deterministic, trained-like random weights to `path`, stored as `dtype`.
// values_through: the weights are first rounded through the storage a file of this type gives them
// (so that an f32 file can hold exactly the values of a bf16, f16 or q8 one).
inline void write_test_model(const ModelConfig& config, const std::string& path, uint64_t seed,
                             DType dtype = DType::F32, DType values_through = DType::F32) {
  std::vector<WriteTensor> tensors;
  uint64_t stream = seed;
  for (const TensorSpec& spec : expected_tensors(config)) {
    const uint64_t tensor_seed = ++stream * 0x9e3779b97f4a7c15ull;
    const std::string name = spec.name;
    const std::vector<int64_t> shape = spec.shape;
    tensors.push_back(
        {name, shape, [=](float* dst) {
           uint64_t s = tensor_seed;
           auto uniform = [&s] {  // xorshift64*, in (-1, 1)
             s ^= s >> 12;
             s ^= s << 25;
             s ^= s >> 27;
             return static_cast<float>(
                 static_cast<double>((s * 0x2545f4914f6cdd1dull) >> 11) / 4503599627370496.0 - 1.0);
           };
           const int64_t n = TensorSpec{name, shape}.elements();
           const bool norm = name.size() >= 4 && name.compare(name.size() - 4, 4, "norm") == 0;
           const bool bias = name.find("bias") != std::string::npos;
           const bool embedding =
               name.find("tok_emb") == 0 || name.find("start") != std::string::npos;
           const float scale =
               embedding ? 1.7f : std::sqrt(3.0f / static_cast<float>(shape.back()));
           for (int64_t i = 0; i < n; ++i) {
             const float u = uniform();
             dst[i] = norm   ? 1.0f + 0.1f * u
                      : bias ? 0.1f * u
                             : scale * u * (name == "lm_head" ? 4.0f : 1.0f);
           }
           const DType through = stored_dtype(values_through, shape);
           if (through != DType::F32) {
             std::vector<uint16_t> narrow(static_cast<size_t>(n));  // q8 takes fewer bytes
             convert_from_f32(through, dst, narrow.data(), narrow.size());
             convert_to_f32(through, narrow.data(), dst, narrow.size());
           }
         }});
  }
  const std::string tokenizer = pad_tokenizer_model(
      read_binary(PHOTON_SOURCE_DIR "/tests/data/tiny.model"), config.vocab_size, "tiny.model");
  WriteOptions options;
  options.dtype = dtype;
  write_model_file(path, config, tokenizer, tensors, options);
}

}  // namespace photon::testing
