#include "engine/model.h"

#include "core/error.h"
#include "engine/weights.h"

namespace photon {

std::unique_ptr<Model> Model::load(const std::string& path, const ProgressFn& progress,
                                   const DeviceChoice& device, int threads) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = ModelFile::open(path, progress);
  m->tokenizer_ = std::make_unique<Tokenizer>(m->file_->tokenizer_model(), path);
  const int32_t pieces = m->tokenizer_->vocab_size();
  if (pieces != m->config().vocab_size)
    fail(PHOTON_ERR_TOKENIZER, path + ": the tokenizer has " + std::to_string(pieces) +
                                   " pieces but vocab_size is " +
                                   std::to_string(m->config().vocab_size));
  m->config_json_ = config_to_json(m->config());
  m->backend_ = make_backend(device, threads);
  return m;
}

Model::~Model() = default;

const Weights& Model::weights() const {
  std::call_once(weights_once_, [this] { weights_ = Weights::bind(*file_, *backend_); });
  return *weights_;
}

}  // namespace photon
