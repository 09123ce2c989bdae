// Fuzz target: loading a model file (photon_model_load: FlatBuffers header, sizes against the real
// file, tensor set against the config, the embedded tokenizer), then using what loaded: tensor
// table, metadata, scoring and a short generation, which reach every weight through the mapping.
#include <algorithm>

#include "fuzz_common.h"

namespace {

using photon::fuzz::no_bug;
using photon::fuzz::require;

void use(photon_model* model) {
  for (size_t i = 0; i < photon_model_tensor_count(model); ++i) {
    const char* name = nullptr;
    int64_t shape[PHOTON_MAX_DIMS];
    int32_t n_dims = 0;
    uint64_t offset = 0, size = 0;
    require(photon_model_tensor_info(model, i, &name, nullptr, &n_dims, shape, &offset, &size) ==
                PHOTON_OK,
            "tensor_info failed inside the table");
    require(n_dims >= 1 && n_dims <= PHOTON_MAX_DIMS, "a loaded tensor has an invalid rank");
  }
  for (size_t i = 0; i < photon_model_metadata_count(model); ++i) {
    const char *key = nullptr, *value = nullptr;
    require(photon_model_metadata_at(model, i, &key, &value) == PHOTON_OK && key && value,
            "metadata_at failed");
  }
  const int32_t vocab = photon_model_vocab_size(model);
  const int32_t context = photon_model_context_length(model);
  const int32_t tokens[3] = {0, 1 % vocab, 2 % vocab};
  const size_t n = static_cast<size_t>(std::min(context, 3));
  float logprobs[3];
  no_bug(photon_model_score(model, tokens, n, logprobs), "photon_model_score");

  // A small context: the caches of a session are allocated for it up front.
  photon_session_options* options = nullptr;
  photon_session_options_create(&options);
  photon_session_options_set_context_length(options, std::min(context, 8));
  photon_session* session = nullptr;
  if (no_bug(photon_session_create(model, options, &session), "photon_session_create") ==
      PHOTON_OK) {
    if (no_bug(photon_session_prefill(session, tokens, n), "photon_session_prefill") == PHOTON_OK)
      no_bug(photon_session_generate(session, 3, nullptr, nullptr, nullptr),
             "photon_session_generate");
    photon_session_free(session);
  }
  photon_session_options_free(options);
  size_t n_tokens = 0;
  int32_t text_tokens[64];
  no_bug(photon_model_tokenize(model, "In the beginning", 16, 1, text_tokens, 64, &n_tokens),
         "photon_model_tokenize");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const photon::fuzz::MemFile file(data, size);
  photon_model* model = nullptr;
  if (no_bug(photon_model_load(file.path(), nullptr, &model), "photon_model_load") != PHOTON_OK) {
    require(model == nullptr, "a failed load wrote its out-parameter");
    return 0;
  }
  use(model);
  photon_model_free(model);
  return 0;
}
