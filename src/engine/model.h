// A loaded model: the verified file, its tokenizer, the backend it runs on and its weights.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/device.h"
#include "format/model_file.h"
#include "tokenizer/tokenizer.h"

namespace photon {

struct Weights;

class Model {
 public:
  // Verifies the file and creates the backend of `device` (backend/device.h); threads is the CPU
  // backend's thread budget (photon_load_options_set_threads; 0: the default).
  static std::unique_ptr<Model> load(const std::string& path, const ProgressFn& progress,
                                     const DeviceChoice& device = {}, int threads = 0);
  ~Model();

  const ModelFile& file() const { return *file_; }
  const ModelConfig& config() const { return file_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& config_json() const { return config_json_; }
  Backend& backend() const { return *backend_; }
  // Weights are bound on first use (thread-safe), so that inspecting a multi-GiB file never
  // converts or uploads it; the CPU backend uses them in place from the mapping, in their stored
  // type.
  const Weights& weights() const;

 private:
  Model() = default;
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string config_json_;
  std::unique_ptr<Backend> backend_;
  mutable std::once_flag weights_once_;
  mutable std::unique_ptr<Weights> weights_;
};

}  // namespace photon
