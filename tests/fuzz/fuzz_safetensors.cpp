// Fuzz target: the safetensors reader and the checkpoint converter's inputs. Input: one byte
// choosing what the rest is.
//   0: a safetensors file. What opens must describe tensors inside the file whose sizes agree
//      with their shapes, each readable.
//   1: a Hugging Face config.json. What maps must be a valid vanilla configuration, every tensor
//      of which has a Hugging Face name.
//   2: both, as [2-byte little-endian length of the JSON][config.json][safetensors], converted
//      with photon_model_convert_from (tokenizer tests/data/tiny.model); a file it writes must
//      load.
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "format/hf_config.h"
#include "format/safetensors.h"
#include "fuzz_common.h"

namespace {

using photon::fuzz::no_bug;
using photon::fuzz::require;

void read_file(const uint8_t* data, size_t size) {
  const photon::fuzz::MemFile file(data, size);
  std::unique_ptr<photon::SafetensorsFile> opened;
  try {
    opened = photon::SafetensorsFile::open(file.path());
  } catch (const photon::Error& e) {
    no_bug(e.status(), "SafetensorsFile::open");
    return;
  }
  for (const photon::SafetensorsTensor& t : opened->tensors()) {
    require(t.offset >= 8 && t.offset <= size && t.size <= size - t.offset,
            "a tensor lies outside the file");
    require(static_cast<uint64_t>(t.elements()) * photon::dtype_size(t.dtype) == t.size,
            "a tensor's size disagrees with its shape");
    require(opened->find(t.name) == &t, "find does not return the tensor");
    std::vector<float> values(static_cast<size_t>(t.elements()));
    opened->read_f32(t, values.data());
  }
}

void map_config(const std::string& text) {
  photon::HfModel model;
  try {
    if (!photon::is_hf_config(text, "config")) return;
    model = photon::hf_config_from_json(text, "config");
  } catch (const photon::Error& e) {
    no_bug(e.status(), "hf_config_from_json");
    return;
  }
  try {
    photon::validate_config(model.config);
  } catch (const photon::Error& e) {
    photon::fuzz::finding(std::string("a mapped config is invalid: ") + e.what());
  }
  require(model.config.arch == photon::Arch::Vanilla, "a mapped config is not vanilla");
  // Bounded: a config can ask for 4096 layers of 9 tensors.
  for (const photon::TensorSpec& spec : photon::expected_tensors(model.config))
    require(!photon::hf_tensor_name(spec.name, model.tied_embeddings).empty(),
            "a tensor has no Hugging Face name");
}

void convert(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t json_size = std::min<size_t>(size - 2, data[0] | data[1] << 8);
  const photon::fuzz::MemFile json(data + 2, json_size),
      weights(data + 2 + json_size, size - 2 - json_size);
  static photon::hardening::TempDir dir;
  static const std::string out = dir.file("converted.photon");
  static const std::string tokenizer = std::string(PHOTON_SOURCE_DIR) + "/tests/data/tiny.model";
  photon_write_options* options = nullptr;
  photon_write_options_create(&options);
  photon_write_options_set_tokenizer_file(options, tokenizer.c_str());
  const photon_status status =
      no_bug(photon_model_convert_from(weights.path(), json.path(), out.c_str(), options),
             "photon_model_convert_from");
  photon_write_options_free(options);
  if (status != PHOTON_OK) return;
  photon_model* model = nullptr;
  require(photon_model_load(out.c_str(), nullptr, &model) == PHOTON_OK,
          std::string("a converted model does not load: ") + photon_last_error());
  photon_model_free(model);
  std::remove(out.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0: read_file(data + 1, size - 1); break;
    case 1: map_config(std::string(reinterpret_cast<const char*>(data + 1), size - 1)); break;
    default: convert(data + 1, size - 1);
  }
  return 0;
}
