// Tiny models shared by the hardening tests (tests/damaged, tests/failure, tests/fuzz): small
// enough that a fuzzer can load, restore and generate from one per input, with the vocabulary of
// tests/data/tiny.model (320 pieces) so that the embedded tokenizer is a real one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"

namespace photon::hardening {

constexpr int kTinyVocab = 320;

// levels 0 is vanilla; 1..3 are PHOTON models (level 1 concat, above linear).
ModelConfig tiny_config(int levels);

// The serialized sentencepiece model of tests/data/tiny.model.
const std::string& tiny_tokenizer();

// Writes `config` with deterministic weights scaled like a trained network (1/sqrt(fan_in)), so
// that generation is peaked and varied rather than uniform.
void write_tiny_model(const std::string& path, const ModelConfig& config, DType dtype = DType::F32,
                      uint64_t seed = 1);

std::vector<uint8_t> read_file(const std::string& path);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace photon::hardening
