// Writing model files (convert, random init) and the preset table.
#include <string>

#include "api/api_internal.h"
#include "format/checkpoint_import.h"
#include "format/model_writer.h"

using photon::api::guard;
using photon::api::require;

namespace {

// The tokenizer to embed, padded to the config's vocabulary.
std::string tokenizer_for(const photon_write_options& o, int32_t vocab_size) {
  if (o.tokenizer_path.empty())
    return photon::pad_tokenizer_model(photon::builtin_tokenizer_model(), vocab_size,
                                       "the built-in tokenizer");
  return photon::pad_tokenizer_model(photon::read_whole_file(o.tokenizer_path), vocab_size,
                                     o.tokenizer_path);
}

photon::WriteOptions write_options(const photon_write_options& o) {
  photon::WriteOptions w;
  w.dtype = o.dtype;
  w.metadata = o.metadata;
  if (o.progress) {
    w.progress = [&o](float f) { return o.progress(o.progress_user, f) == 0; };
  }
  return w;
}

}  // namespace

extern "C" {

photon_status photon_write_options_create(photon_write_options** out) {
  return guard([&] {
    require(out, "photon_write_options_create", "out is NULL");
    *out = new photon_write_options();
  });
}

void photon_write_options_free(photon_write_options* options) {
  delete options;
}

photon_status photon_write_options_set_dtype(photon_write_options* o, photon_dtype dtype) {
  return guard([&] {
    require(o, "photon_write_options_set_dtype", "options is NULL");
    const int value = photon::api::enum_value(dtype);
    require(value == PHOTON_DTYPE_F32 || value == PHOTON_DTYPE_F16 || value == PHOTON_DTYPE_BF16 ||
                value == PHOTON_DTYPE_Q8,
            "photon_write_options_set_dtype", "unknown dtype");
    o->dtype = static_cast<photon::DType>(dtype);
  });
}

photon_status photon_write_options_set_tokenizer_file(photon_write_options* o, const char* path) {
  return guard([&] {
    require(o, "photon_write_options_set_tokenizer_file", "options is NULL");
    require(path && *path, "photon_write_options_set_tokenizer_file", "path is NULL or empty");
    o->tokenizer_path = path;
  });
}

photon_status photon_write_options_set_seed(photon_write_options* o, uint64_t seed) {
  return guard([&] {
    require(o, "photon_write_options_set_seed", "options is NULL");
    o->seed = seed;
  });
}

photon_status photon_write_options_set_metadata(photon_write_options* o, const char* key,
                                                const char* value) {
  return guard([&] {
    require(o, "photon_write_options_set_metadata", "options is NULL");
    require(key && *key, "photon_write_options_set_metadata", "key is NULL or empty");
    require(value, "photon_write_options_set_metadata", "value is NULL");
    for (auto& [k, v] : o->metadata)
      if (k == key) {
        v = value;
        return;
      }
    o->metadata.emplace_back(key, value);
  });
}

photon_status photon_write_options_set_progress(photon_write_options* o,
                                                photon_progress_callback callback,
                                                void* user_data) {
  return guard([&] {
    require(o, "photon_write_options_set_progress", "options is NULL");
    o->progress = callback;
    o->progress_user = user_data;
  });
}

photon_status photon_model_convert(const char* config_json_path, const char* weights_npz_path,
                                   const char* out_path, const photon_write_options* options) {
  return guard([&] {
    require(config_json_path, "photon_model_convert", "config_json_path is NULL");
    require(weights_npz_path, "photon_model_convert", "weights_npz_path is NULL");
    require(out_path, "photon_model_convert", "out_path is NULL");
    const photon_write_options defaults;
    const photon_write_options& o = options ? *options : defaults;
    const photon::ModelConfig config =
        photon::config_from_json(photon::read_whole_file(config_json_path), config_json_path);
    photon::convert_npz_model(config_json_path, weights_npz_path,
                              tokenizer_for(o, config.vocab_size), out_path, write_options(o));
  });
}

photon_status photon_model_convert_from(const char* path, const char* config_json_path,
                                        const char* out_path, const photon_write_options* options) {
  return guard([&] {
    require(path && *path, "photon_model_convert_from", "path is NULL or empty");
    require(out_path, "photon_model_convert_from", "out_path is NULL");
    const photon_write_options defaults;
    const photon_write_options& o = options ? *options : defaults;
    if (photon::is_model_file(path)) {
      if (config_json_path)
        photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                     std::string("photon_model_convert_from: ") + path +
                         " is a model file, which holds its own configuration");
      const auto source = photon::ModelFile::open(path);
      const std::string tokenizer = o.tokenizer_path.empty()
                                        ? source->tokenizer_model()
                                        : tokenizer_for(o, source->config().vocab_size);
      photon::rewrite_model_file(*source, tokenizer, out_path, write_options(o));
      return;
    }
    photon::convert_checkpoint({path, config_json_path ? config_json_path : "", o.tokenizer_path},
                               out_path, write_options(o));
  });
}

photon_status photon_model_init_random(const char* config_json, const char* out_path,
                                       const photon_write_options* options) {
  return guard([&] {
    require(config_json, "photon_model_init_random", "config_json is NULL");
    require(out_path, "photon_model_init_random", "out_path is NULL");
    const photon_write_options defaults;
    const photon_write_options& o = options ? *options : defaults;
    const photon::ModelConfig config = photon::config_from_json(config_json, "config");
    photon::write_random_model(out_path, config, tokenizer_for(o, config.vocab_size), o.seed,
                               write_options(o));
  });
}

const char* photon_preset_name(size_t index) {
  static const std::vector<std::string> names = photon::preset_names();
  return index < names.size() ? names[index].c_str() : nullptr;
}

photon_status photon_preset_config(const char* name, char* json, size_t capacity,
                                   size_t* json_len) {
  return guard([&] {
    require(name, "photon_preset_config", "name is NULL");
    require(json_len, "photon_preset_config", "json_len is NULL");
    photon::ModelConfig config;
    if (!photon::find_preset(name, &config))
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                   std::string("photon_preset_config: unknown preset '") + name + "'");
    const std::string s = photon::config_to_json(config);
    *json_len = s.size();
    if (capacity < s.size() + 1 || !json)
      photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL, "photon_preset_config: the buffer holds " +
                                                    std::to_string(capacity) + " bytes but " +
                                                    std::to_string(s.size() + 1) + " are needed");
    s.copy(json, s.size());
    json[s.size()] = '\0';
  });
}

photon_status photon_config_parameter_count(const char* config_json, uint64_t* count) {
  return guard([&] {
    require(config_json, "photon_config_parameter_count", "config_json is NULL");
    require(count, "photon_config_parameter_count", "count is NULL");
    *count = photon::parameter_count(photon::config_from_json(config_json, "config"));
  });
}

}  // extern "C"
