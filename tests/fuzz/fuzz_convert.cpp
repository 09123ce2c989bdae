// Fuzz target: the converter's inputs, config.json and weights.npz (spec section 8). Input: one
// byte choosing what the rest is.
//   0: config.json text. What parses must survive config_to_json and parse back equal, with the
//      same parameter count.
//   1: a weights.npz archive (zip of .npy arrays, stored or deflated, ZIP64).
//   2: both, as [2-byte little-endian length of the JSON][JSON][npz], converted with
//      photon_model_convert (tokenizer tests/data/tiny.model) in f32 and, where that succeeds, in
//      q8; a file it writes must load.
#include "core/config.h"
#include "core/error.h"
#include "format/npz.h"
#include "fuzz_common.h"

namespace {

using photon::fuzz::no_bug;
using photon::fuzz::require;

void config_round_trip(const std::string& text) {
  uint64_t count = 0;
  if (no_bug(photon_config_parameter_count(text.c_str(), &count),
             "photon_config_parameter_count") != PHOTON_OK)
    return;
  const photon::ModelConfig config = photon::config_from_json(text, "config");
  const std::string written = photon::config_to_json(config);
  try {
    require(photon::config_from_json(written, "written") == config,
            "a config changes through config_to_json");
  } catch (const photon::Error& e) {
    photon::fuzz::finding(std::string("config_to_json wrote a config that does not parse: ") +
                          e.what());
  }
  require(photon::parameter_count(config) == count, "parameter counts differ");
}

void read_archive(const uint8_t* data, size_t size) {
  const photon::fuzz::MemFile file(data, size);
  try {
    for (const auto& [name, array] : photon::read_npz(file.path())) {
      uint64_t elements = 1;
      for (int64_t d : array.shape) elements *= static_cast<uint64_t>(d);
      require(array.data.size() == elements, "an array's data disagrees with its shape");
    }
  } catch (const photon::Error& e) {
    no_bug(e.status(), "read_npz");
  }
}

// Converts the inputs into `dtype`; whether it wrote a file, which must load.
bool convert_to(const photon::fuzz::MemFile& json, const photon::fuzz::MemFile& npz,
                photon_dtype dtype) {
  static photon::hardening::TempDir dir;
  static const std::string out = dir.file("converted.photon");
  static const std::string tokenizer = std::string(PHOTON_SOURCE_DIR) + "/tests/data/tiny.model";
  photon_write_options* options = nullptr;
  photon_write_options_create(&options);
  photon_write_options_set_tokenizer_file(options, tokenizer.c_str());
  photon_write_options_set_dtype(options, dtype);
  const photon_status status = no_bug(
      photon_model_convert(json.path(), npz.path(), out.c_str(), options), "photon_model_convert");
  photon_write_options_free(options);
  if (status != PHOTON_OK) return false;
  photon_model* model = nullptr;
  require(photon_model_load(out.c_str(), nullptr, &model) == PHOTON_OK,
          std::string("a converted model does not load: ") + photon_last_error());
  photon_model_free(model);
  std::remove(out.c_str());
  return true;
}

void convert(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t json_size = std::min<size_t>(size - 2, data[0] | data[1] << 8);
  const photon::fuzz::MemFile json(data + 2, json_size),
      npz(data + 2 + json_size, size - 2 - json_size);
  if (convert_to(json, npz, PHOTON_DTYPE_F32)) convert_to(json, npz, PHOTON_DTYPE_Q8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0:
      config_round_trip(std::string(reinterpret_cast<const char*>(data + 1), size - 1).c_str());
      break;
    case 1: read_archive(data + 1, size - 1); break;
    default: convert(data + 1, size - 1);
  }
  return 0;
}
