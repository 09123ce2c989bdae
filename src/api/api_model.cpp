// photon_model_*: loading, information, tokenization and scoring.
#include <cmath>
#include <string>

#include "api/api_internal.h"
#include "engine/score.h"

using photon::api::copy_out;
using photon::api::guard;
using photon::api::require;

namespace {

void check_tokens(const photon::Model& m, const int32_t* tokens, size_t n, const char* function) {
  const int32_t v = m.config().vocab_size;
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= v)
      photon::fail(PHOTON_ERR_BAD_TOKEN, std::string(function) + ": token " +
                                             std::to_string(tokens[i]) + " at position " +
                                             std::to_string(i) + " is outside the vocabulary [0, " +
                                             std::to_string(v) + ")");
}

// Copies s and a NUL into text, or fails with PHOTON_ERR_BUFFER_TOO_SMALL; *text_len = s.size().
void copy_text(const std::string& s, char* text, size_t capacity, size_t* text_len,
               const char* function) {
  *text_len = s.size();
  if (capacity < s.size() + 1 || !text)
    photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL, std::string(function) + ": the buffer holds " +
                                                  std::to_string(capacity) + " bytes but " +
                                                  std::to_string(s.size() + 1) + " are needed");
  s.copy(text, s.size());
  text[s.size()] = '\0';
}

}  // namespace

extern "C" {

photon_status photon_load_options_create(photon_load_options** out) {
  return guard([&] {
    require(out, "photon_load_options_create", "out is NULL");
    *out = new photon_load_options();
  });
}

void photon_load_options_free(photon_load_options* options) {
  delete options;
}

photon_status photon_load_options_set_progress(photon_load_options* options,
                                               photon_progress_callback callback, void* user_data) {
  return guard([&] {
    require(options, "photon_load_options_set_progress", "options is NULL");
    options->progress = callback;
    options->progress_user = user_data;
  });
}

photon_status photon_load_options_set_device(photon_load_options* options, const char* device) {
  return guard([&] {
    require(options, "photon_load_options_set_device", "options is NULL");
    require(device, "photon_load_options_set_device", "device is NULL");
    const auto precision = options->device.precision;
    options->device = photon::parse_device(device, "photon_load_options_set_device");
    options->device.precision = precision;
  });
}

photon_status photon_load_options_set_precision(photon_load_options* options,
                                                const char* precision) {
  return guard([&] {
    require(options, "photon_load_options_set_precision", "options is NULL");
    require(precision, "photon_load_options_set_precision", "precision is NULL");
    options->device.precision =
        photon::parse_precision(precision, "photon_load_options_set_precision");
  });
}

photon_status photon_load_options_set_threads(photon_load_options* options, int32_t threads) {
  return guard([&] {
    require(options, "photon_load_options_set_threads", "options is NULL");
    if (threads < 0)
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, "photon_load_options_set_threads: threads " +
                                                    std::to_string(threads) +
                                                    " is negative (0 means every core)");
    options->threads = threads;
  });
}

photon_status photon_load_options_set_verify(photon_load_options* options, int verify) {
  return guard([&] {
    require(options, "photon_load_options_set_verify", "options is NULL");
    options->verify = verify != 0;
  });
}

photon_status photon_model_load(const char* path, const photon_load_options* options,
                                photon_model** out) {
  return guard([&] {
    require(path, "photon_model_load", "path is NULL");
    require(out, "photon_model_load", "out is NULL");
    photon::ProgressFn progress;
    if (options && options->progress) {
      progress = [options](float f) { return options->progress(options->progress_user, f) == 0; };
    }
    auto handle = std::make_unique<photon_model>();
    handle->model =
        photon::Model::load(path, progress, options ? options->device : photon::DeviceChoice{},
                            options ? options->threads : 0);
    if (options && options->verify) handle->model->file().verify_data();
    handle->device = handle->model->backend().name();
    *out = handle.release();
  });
}

void photon_model_free(photon_model* model) {
  delete model;
}

const char* photon_model_device(const photon_model* model) {
  return model ? model->device.c_str() : "";
}

const char* photon_model_precision(const photon_model* model) {
  return model ? photon::precision_name(model->model->backend().precision()) : "";
}

photon_status photon_model_memory(const photon_model* model, uint64_t* in_use, uint64_t* peak,
                                  int reset_peak) {
  return guard([&] {
    require(model, "photon_model_memory", "model is NULL");
    const photon::MemoryUse use = model->model->backend().memory(reset_peak != 0);
    if (in_use) *in_use = use.in_use;
    if (peak) *peak = use.peak;
  });
}

const char* photon_model_arch(const photon_model* model) {
  if (!model) return "";
  return model->model->config().arch == photon::Arch::Vanilla ? "vanilla" : "photon";
}

int32_t photon_model_levels(const photon_model* model) {
  return model ? model->model->config().num_levels() : 0;
}

uint64_t photon_model_parameter_count(const photon_model* model) {
  return model ? photon::parameter_count(model->model->config()) : 0;
}

int32_t photon_model_vocab_size(const photon_model* model) {
  return model ? model->model->config().vocab_size : 0;
}

int32_t photon_model_context_length(const photon_model* model) {
  return model ? model->model->config().max_seq_len : 0;
}

int32_t photon_model_bos(const photon_model* model) {
  return model ? model->model->tokenizer().bos() : -1;
}

int32_t photon_model_eos(const photon_model* model) {
  return model ? model->model->tokenizer().eos() : -1;
}

const char* photon_model_config_json(const photon_model* model) {
  return model ? model->model->config_json().c_str() : "";
}

const char* photon_model_metadata(const photon_model* model, const char* key) {
  if (!model || !key) return nullptr;
  for (const auto& [k, v] : model->model->file().metadata())
    if (k == key) return v.c_str();
  return nullptr;
}

size_t photon_model_metadata_count(const photon_model* model) {
  return model ? model->model->file().metadata().size() : 0;
}

photon_status photon_model_metadata_at(const photon_model* model, size_t index, const char** key,
                                       const char** value) {
  return guard([&] {
    require(model, "photon_model_metadata_at", "model is NULL");
    const auto& entries = model->model->file().metadata();
    if (index >= entries.size())
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, "photon_model_metadata_at: index " +
                                                    std::to_string(index) + " is past the " +
                                                    std::to_string(entries.size()) + " entries");
    if (key) *key = entries[index].first.c_str();
    if (value) *value = entries[index].second.c_str();
  });
}

photon_status photon_model_tokenizer_model(const photon_model* model, void* buffer, size_t capacity,
                                           size_t* size) {
  return guard([&] {
    require(model, "photon_model_tokenizer_model", "model is NULL");
    require(size, "photon_model_tokenizer_model", "size is NULL");
    const std::string& bytes = model->model->file().tokenizer_model();
    *size = bytes.size();
    copy_out("photon_model_tokenizer_model", bytes.data(), bytes.size(), static_cast<char*>(buffer),
             capacity);
  });
}

photon_status photon_model_tokenize(const photon_model* model, const char* text, size_t text_len,
                                    int add_bos, int32_t* tokens, size_t capacity,
                                    size_t* n_tokens) {
  return guard([&] {
    require(model, "photon_model_tokenize", "model is NULL");
    require(text || text_len == 0, "photon_model_tokenize", "text is NULL");
    require(n_tokens, "photon_model_tokenize", "n_tokens is NULL");
    const std::vector<int32_t> ids = model->model->tokenizer().encode(
        std::string_view(text ? text : "", text_len), add_bos != 0);
    *n_tokens = ids.size();
    copy_out("photon_model_tokenize", ids.data(), ids.size(), tokens, capacity);
  });
}

photon_status photon_model_detokenize(const photon_model* model, const int32_t* tokens,
                                      size_t n_tokens, char* text, size_t capacity,
                                      size_t* text_len) {
  return guard([&] {
    require(model, "photon_model_detokenize", "model is NULL");
    require(tokens || n_tokens == 0, "photon_model_detokenize", "tokens is NULL");
    require(text_len, "photon_model_detokenize", "text_len is NULL");
    check_tokens(*model->model, tokens, n_tokens, "photon_model_detokenize");
    const std::string s =
        model->model->tokenizer().decode(std::vector<int32_t>(tokens, tokens + n_tokens));
    copy_text(s, text, capacity, text_len, "photon_model_detokenize");
  });
}

photon_status photon_model_token_piece(const photon_model* model, int32_t token, int32_t previous,
                                       char* text, size_t capacity, size_t* text_len) {
  return guard([&] {
    const char* function = "photon_model_token_piece";
    require(model, function, "model is NULL");
    require(text_len, function, "text_len is NULL");
    const photon::Tokenizer& tok = model->model->tokenizer();
    check_tokens(*model->model, &token, 1, function);
    if (previous != -1) check_tokens(*model->model, &previous, 1, function);
    const std::string s =
        tok.token_bytes(token, previous >= 0 && tok.is_text_token(previous) ? previous : -1);
    copy_text(s, text, capacity, text_len, function);
  });
}

photon_status photon_model_score(const photon_model* model, const int32_t* tokens, size_t n_tokens,
                                 float* logprobs) {
  return photon_model_score_with(model, tokens, n_tokens, nullptr, logprobs);
}

photon_status photon_score_options_create(photon_score_options** out) {
  return guard([&] {
    require(out, "photon_score_options_create", "out is NULL");
    *out = new photon_score_options();
  });
}

void photon_score_options_free(photon_score_options* options) {
  delete options;
}

photon_status photon_score_options_set_mode(photon_score_options* options, photon_mode mode) {
  return guard([&] {
    require(options, "photon_score_options_set_mode", "options is NULL");
    const int value = photon::api::enum_value(mode);
    if (value != PHOTON_MODE_AUTO && value != PHOTON_MODE_HIERGEN && value != PHOTON_MODE_RECGEN)
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                   "photon_score_options_set_mode: unknown mode " + std::to_string(value));
    options->mode = mode;
  });
}

photon_status photon_score_options_set_prompt_tokens(photon_score_options* options, size_t n) {
  return guard([&] {
    require(options, "photon_score_options_set_prompt_tokens", "options is NULL");
    require(n >= 1, "photon_score_options_set_prompt_tokens",
            "the prompt holds at least one token (BOS)");
    options->prompt_tokens = n;
  });
}

photon_status photon_score_options_set_stride(photon_score_options* options, int32_t stride) {
  return guard([&] {
    require(options, "photon_score_options_set_stride", "options is NULL");
    if (stride < 0)
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, "photon_score_options_set_stride: stride " +
                                                    std::to_string(stride) +
                                                    " is negative (0 means half the context)");
    options->stride = stride;
  });
}

namespace {

// photon_model_score, _with and _top: `function` names the call in messages.
photon_status score(const char* function, const photon_model* model, const int32_t* tokens,
                    size_t n_tokens, const photon_score_options* options, float* logprobs,
                    photon::TopRows top) {
  return guard([&] {
    require(model, function, "model is NULL");
    require(tokens, function, "tokens is NULL");
    require(logprobs, function, "logprobs is NULL");
    require(n_tokens > 0, function, "n_tokens is 0");
    const photon::Model& m = *model->model;
    check_tokens(m, tokens, n_tokens, function);
    photon::ScoreSettings settings;
    if (options) {
      settings.recgen = options->mode == PHOTON_MODE_RECGEN;
      settings.prompt_tokens = options->prompt_tokens;
      settings.stride = options->stride;
    }
    photon::score_sequence(m, std::span<const int32_t>(tokens, n_tokens), settings, logprobs,
                           function, top);
  });
}

}  // namespace

photon_status photon_model_score_with(const photon_model* model, const int32_t* tokens,
                                      size_t n_tokens, const photon_score_options* options,
                                      float* logprobs) {
  // photon_model_score's checks name it: it is this call with the defaults.
  return score(options ? "photon_model_score_with" : "photon_model_score", model, tokens, n_tokens,
               options, logprobs, {});
}

photon_status photon_model_score_top(const photon_model* model, const int32_t* tokens,
                                     size_t n_tokens, const photon_score_options* options,
                                     int32_t k, float* logprobs, int32_t* top_tokens,
                                     float* top_logprobs) {
  const char* function = "photon_model_score_top";
  const photon_status status = guard([&] {
    require(model, function, "model is NULL");
    const int32_t vocab = model->model->config().vocab_size;
    if (k < 1 || k > vocab)
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": k is " +
                                                    std::to_string(k) + ", expected 1 to " +
                                                    std::to_string(vocab) + " (the vocabulary)");
    require(top_tokens, function, "top_tokens is NULL");
    require(top_logprobs, function, "top_logprobs is NULL");
  });
  if (status != PHOTON_OK) return status;
  return score(function, model, tokens, n_tokens, options, logprobs, {k, top_tokens, top_logprobs});
}

size_t photon_model_tensor_count(const photon_model* model) {
  return model ? model->model->file().tensors().size() : 0;
}

photon_status photon_model_tensor_info(const photon_model* model, size_t index, const char** name,
                                       photon_dtype* dtype, int32_t* n_dims,
                                       int64_t shape[PHOTON_MAX_DIMS], uint64_t* offset,
                                       uint64_t* size_bytes) {
  return guard([&] {
    require(model, "photon_model_tensor_info", "model is NULL");
    const auto& tensors = model->model->file().tensors();
    if (index >= tensors.size())
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, "photon_model_tensor_info: index " +
                                                    std::to_string(index) + " is past the " +
                                                    std::to_string(tensors.size()) + " tensors");
    const photon::TensorEntry& t = tensors[index];
    if (name) *name = t.name.c_str();
    if (dtype) *dtype = static_cast<photon_dtype>(t.dtype);
    if (n_dims) *n_dims = static_cast<int32_t>(t.shape.size());
    if (shape)
      for (size_t i = 0; i < t.shape.size() && i < PHOTON_MAX_DIMS; ++i) shape[i] = t.shape[i];
    if (offset) *offset = model->model->file().data_offset() + t.offset;
    if (size_bytes) *size_bytes = t.size;
  });
}

uint64_t photon_model_data_offset(const photon_model* model) {
  return model ? model->model->file().data_offset() : 0;
}

}  // extern "C"
