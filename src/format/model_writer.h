// Writing .photon model files: from the config.json + weights.npz interchange format (spec
// section 8), or with seeded random weights. Files are written to "<path>.tmp" and renamed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"
#include "format/model_file.h"

namespace photon {

struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  // Writes the tensor's elements() values, row-major, as f32 into dst.
  std::function<void(float* dst)> fill;
};

struct WriteOptions {
  DType dtype = DType::F32;
  std::vector<std::pair<std::string, std::string>>
      metadata;  // "producer"/"created" added if absent
  ProgressFn progress;
};

// The storage of a tensor of `shape` in a file written with `dtype`: `dtype`, except that q8
// files keep vectors (norms, biases, the start latent) in f32, and matrices whose rows are not
// whole blocks of 32 in f16.
DType stored_dtype(DType dtype, const std::vector<int64_t>& shape);

// The bytes of a file; an allocation failure surfaces as such, never as a truncated file.
std::string read_whole_file(const std::string& path);

// Writes a model file. `tensors` must be exactly expected_tensors(config) (any order); the
// tokenizer must already have config.vocab_size pieces. Throws Error.
void write_model_file(const std::string& path, const ModelConfig& config,
                      const std::string& tokenizer_model, const std::vector<WriteTensor>& tensors,
                      const WriteOptions& options);

// Writes the model of `source` again, each tensor widened to f32 and stored as options.dtype says
// (to quantize a model, or to widen one), with `tokenizer_model` and the source's metadata
// (options' entries replace them; "producer" and "created" are the new file's; "source" names
// the source file unless the options set it).
void rewrite_model_file(const ModelFile& source, const std::string& tokenizer_model,
                        const std::string& path, const WriteOptions& options);

// Seeded random weights (spec: normal(0, 0.02) matrices and embeddings, ones for norms, zeros for
// biases), generated tensor by tensor so that multi-GiB files never sit in memory.
void write_random_model(const std::string& path, const ModelConfig& config,
                        const std::string& tokenizer_model, uint64_t seed,
                        const WriteOptions& options);

// config.json + weights.npz -> .photon. Missing, extra or misshapen arrays are refused naming the
// array and the npz file.
void convert_npz_model(const std::string& config_json_path, const std::string& npz_path,
                       const std::string& tokenizer_model, const std::string& out_path,
                       const WriteOptions& options);

}  // namespace photon
