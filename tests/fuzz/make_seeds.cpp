// Writes the fuzzers' seed inputs, valid and damaged, into <dir>/<target>/. scripts/fuzz --seeds
// runs it and keeps (libFuzzer -merge) the seeds that add coverage in tests/fuzz/corpus/.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "../unit/safetensors_util.h"
#include "core/config.h"
#include "core/dtype.h"
#include "damage_cases.h"
#include "format/hf_config.h"
#include "fuzz_common.h"

namespace {

namespace fs = std::filesystem;
using photon::hardening::read_file;
using photon::hardening::tiny_config;
using photon::hardening::write_file;
using Bytes = std::vector<uint8_t>;

class SeedDir {
 public:
  SeedDir(const fs::path& root, const std::string& target) : dir_(root / target) {
    fs::create_directories(dir_);
  }
  void add(const std::string& name, const Bytes& bytes) {
    write_file((dir_ / name).string(), bytes);
  }
  void add(const std::string& name, uint8_t prefix, const Bytes& bytes) {
    Bytes prefixed{prefix};
    prefixed.insert(prefixed.end(), bytes.begin(), bytes.end());
    add(name, prefixed);
  }

 private:
  fs::path dir_;
};

void put16(Bytes& b, uint32_t v) {
  b.insert(b.end(), {uint8_t(v), uint8_t(v >> 8)});
}
void put32(Bytes& b, uint32_t v) {
  b.insert(b.end(), {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)});
}

// ---- model files ------------------------------------------------------------------------------

void model_seeds(const fs::path& root, photon::hardening::TempDir& tmp) {
  SeedDir seeds(root, "model_file");
  Bytes photon_file, vanilla_file;
  const struct {
    int levels;
    photon::DType dtype;
  } variants[] = {{0, photon::DType::F32},
                  {0, photon::DType::F16},
                  {1, photon::DType::BF16},
                  {2, photon::DType::F32},
                  {3, photon::DType::F16}};
  for (const auto& v : variants) {
    const std::string name =
        "valid-l" + std::to_string(v.levels) + "-" + photon::dtype_name(v.dtype);
    photon::hardening::write_tiny_model(tmp.file(name), tiny_config(v.levels), v.dtype);
    seeds.add(name, read_file(tmp.file(name)));
    if (v.dtype == photon::DType::F32)
      (v.levels == 0 ? vanilla_file : photon_file) = read_file(tmp.file(name));
  }
  // q8 needs rows of whole blocks of 32: a vanilla model 32 wide.
  photon::ModelConfig wide = tiny_config(0);
  wide.dim = 32;
  wide.stack = {1, 2, 1, 16, 32};
  photon::hardening::write_tiny_model(tmp.file("valid-l0-q8"), wide, photon::DType::Q8);
  seeds.add("valid-l0-q8", read_file(tmp.file("valid-l0-q8")));
  int i = 0;
  for (const auto& c : photon::hardening::damaged_model_files(photon_file, vanilla_file))
    seeds.add("damaged-" + std::to_string(i++), c.bytes);
}

// ---- session states ---------------------------------------------------------------------------

Bytes saved_state(int levels, photon_mode mode, int prompt_len, int generate, bool sampler) {
  photon_session_options* o = nullptr;
  photon_session_options_create(&o);
  photon_session_options_set_mode(o, mode);
  if (sampler) {
    photon_session_options_set_temperature(o, 0.7f);
    photon_session_options_set_top_k(o, 20);
    photon_session_options_set_top_p(o, 0.9f);
    photon_session_options_set_repetition_penalty(o, 1.2f, 16);
    photon_session_options_set_presence_penalty(o, 0.3f);
    photon_session_options_set_frequency_penalty(o, 0.2f);
    const int32_t biased[] = {5, 40};
    const float biases[] = {2.0f, -100.0f};
    photon_session_options_set_logit_bias(o, biased, biases, 2);
    photon_session_options_add_stop_string(o, "zz");
    photon_session_options_set_seed(o, 99);
  }
  photon_session* s = nullptr;
  photon::fuzz::require(photon_session_create(photon::fuzz::tiny_model(levels), o, &s) == PHOTON_OK,
                        "create");
  photon_session_options_free(o);
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(i == 0 ? 1 : 5 + (i * 37) % 300);
  photon_session_prefill(s, prompt.data(), prompt.size());
  photon_session_generate(s, generate, nullptr, nullptr, nullptr);
  size_t size = 0;
  photon_session_save(s, nullptr, 0, &size);
  Bytes state(size);
  photon::fuzz::require(photon_session_save(s, state.data(), size, &size) == PHOTON_OK, "save");
  photon_session_free(s);
  return state;
}

void state_seeds(const fs::path& root) {
  SeedDir seeds(root, "session_state");
  for (int levels = 0; levels <= 3; ++levels)
    for (photon_mode mode : {PHOTON_MODE_HIERGEN, PHOTON_MODE_RECGEN}) {
      if (mode == PHOTON_MODE_RECGEN && levels < 2) continue;
      const std::string name =
          "valid-l" + std::to_string(levels) + (mode == PHOTON_MODE_RECGEN ? "-recgen" : "");
      seeds.add(name + "-empty", uint8_t(levels), saved_state(levels, mode, 0, 0, false));
      seeds.add(name + "-short", uint8_t(levels), saved_state(levels, mode, 3, 0, false));
      seeds.add(name + "-long", uint8_t(levels), saved_state(levels, mode, 9, 5, true));
    }
  const photon::hardening::StateBases bases =
      photon::hardening::base_states(photon::fuzz::tiny_model(2), photon::fuzz::tiny_model(0));
  int i = 0;
  for (const auto& c : photon::hardening::damaged_session_states(bases)) {
    const uint8_t levels = c.model == photon::hardening::kVanillaModel ? 0 : 2;
    seeds.add("damaged-" + std::to_string(i++), uint8_t(levels | 4),
              c.bytes);  // bit 2: hash as it is
  }
}

// ---- prompts ----------------------------------------------------------------------------------

void generate_seeds(const fs::path& root) {
  SeedDir seeds(root, "generate");
  const std::pair<uint8_t, std::string> prompts[] = {
      {0x08, "In the beginning God created the heaven and the earth."},
      {0x1a, "And God said, Let there be light: and there was light."},
      {0x3e, "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87"},
      {0x5f, "\xC3\x28 \xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF \xFF\xFE"},
      {0x8b, "stop here. and here."},
      {0x09, ""},
      {0x4c, std::string("nul\0inside", 10)},
      {0x2b, "   leading spaces\tand\ttabs\r\n"},
      {0xff, "\xE2\x96\x81\xE2\x96\x81 the symbol sentencepiece uses for a space"},
  };
  int i = 0;
  for (const auto& [flags, text] : prompts) {
    Bytes input{flags, static_cast<uint8_t>(37 * i + 11)};
    input.insert(input.end(), text.begin(), text.end());
    seeds.add("prompt-" + std::to_string(i++), input);
  }
}

// ---- config.json and weights.npz --------------------------------------------------------------

Bytes npy(const std::vector<int64_t>& shape, const std::vector<float>& values, bool f16) {
  std::string dict =
      std::string("{'descr': '") + (f16 ? "<f2" : "<f4") + "', 'fortran_order': False, 'shape': (";
  for (int64_t d : shape) dict += std::to_string(d) + ", ";
  dict += "), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put16(out, static_cast<uint32_t>(dict.size()));
  out.insert(out.end(), dict.begin(), dict.end());
  const size_t bytes = values.size() * (f16 ? 2 : 4);
  const size_t at = out.size();
  out.resize(at + bytes);
  photon::convert_from_f32(f16 ? photon::DType::F16 : photon::DType::F32, values.data(),
                           out.data() + at, values.size());
  return out;
}

Bytes raw_deflate(const Bytes& data) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, data.size()));
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip archive of stored or deflated members, as numpy.savez(_compressed) writes them.
Bytes zip(const std::vector<std::pair<std::string, Bytes>>& members, bool deflated) {
  Bytes out, central;
  for (const auto& [name, data] : members) {
    const uint32_t crc =
        static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
    const Bytes stored = deflated ? raw_deflate(data) : data;
    const uint32_t offset = static_cast<uint32_t>(out.size());
    for (Bytes* header : {&out, &central}) {
      const bool local = header == &out;
      put32(*header, local ? 0x04034b50 : 0x02014b50);
      if (!local) put16(*header, 20);
      put16(*header, 20);
      put16(*header, 0);
      put16(*header, deflated ? 8 : 0);
      put32(*header, 0);  // time and date
      put32(*header, crc);
      put32(*header, static_cast<uint32_t>(stored.size()));
      put32(*header, static_cast<uint32_t>(data.size()));
      put16(*header, static_cast<uint32_t>(name.size()));
      put16(*header, 0);
      if (!local) {
        put32(*header, 0);  // comment length, disk
        put16(*header, 0);
        put32(*header, 0);  // attributes
        put32(*header, offset);
      }
      header->insert(header->end(), name.begin(), name.end());
    }
    out.insert(out.end(), stored.begin(), stored.end());
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), central.begin(), central.end());
  put32(out, 0x06054b50);
  put32(out, 0);
  put16(out, static_cast<uint32_t>(members.size()));
  put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

Bytes weights_npz(const photon::ModelConfig& config, bool f16, bool deflated) {
  std::vector<std::pair<std::string, Bytes>> members;
  uint32_t state = 1;
  for (const photon::TensorSpec& spec : photon::expected_tensors(config)) {
    std::vector<float> values(static_cast<size_t>(spec.elements()));
    for (float& v : values)
      v = static_cast<float>((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    members.emplace_back(spec.name + ".npy", npy(spec.shape, values, f16));
  }
  return zip(members, deflated);
}

void convert_seeds(const fs::path& root) {
  SeedDir seeds(root, "convert");
  auto text = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  for (int levels = 0; levels <= 3; ++levels)
    seeds.add("config-l" + std::to_string(levels), 0,
              text(photon::config_to_json(tiny_config(levels))));
  for (const std::string& preset : {"photon-600m", "vanilla-small"}) {
    photon::ModelConfig c;
    photon::find_preset(preset, &c);
    seeds.add("config-" + preset, 0, text(photon::config_to_json(c)));
  }
  seeds.add("config-not-json", 0, text("{\"arch\": \"photon\", \"levels\": [{\"chunk_len\": 2,"));
  for (const auto& entry : fs::directory_iterator(PHOTON_SOURCE_DIR "/tests/data/npz"))
    if (entry.path().extension() == ".npz" && fs::file_size(entry.path()) < 4096)
      seeds.add("npz-" + entry.path().stem().string(), 1, read_file(entry.path().string()));
  const struct {
    int levels;
    bool f16, deflated;
  } pairs[] = {{0, false, false}, {0, true, true}, {1, false, true}};
  for (const auto& p : pairs) {
    const std::string json = photon::config_to_json(tiny_config(p.levels));
    Bytes input;
    put16(input, static_cast<uint32_t>(json.size()));
    input.insert(input.end(), json.begin(), json.end());
    const Bytes npz = weights_npz(tiny_config(p.levels), p.f16, p.deflated);
    input.insert(input.end(), npz.begin(), npz.end());
    seeds.add("convert-l" + std::to_string(p.levels) + (p.f16 ? "-f16" : "") +
                  (p.deflated ? "-deflated" : ""),
              2, input);
  }
}

// ---- safetensors and Hugging Face checkpoints ---------------------------------------------------

nlohmann::json hf_llama(bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 4},
          {"intermediate_size", 6},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"vocab_size", 320},  // tests/data/tiny.model
          {"max_position_embeddings", 32},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", tied},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// The tensors of a configuration under the names `name_of` gives, in `dtype`.
Bytes checkpoint(const photon::ModelConfig& config, const std::string& dtype,
                 const std::function<std::string(const std::string&)>& name_of) {
  std::vector<photon::test::StTensor> tensors;
  std::set<std::string> written;
  for (const photon::TensorSpec& spec : photon::expected_tensors(config)) {
    if (!written.insert(name_of(spec.name)).second) continue;  // tied: one embedding
    std::vector<float> values(static_cast<size_t>(spec.elements()));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(i % 13) * 0.125f - 0.75f;
    tensors.push_back(photon::test::st_tensor(name_of(spec.name), dtype, spec.shape, values));
  }
  return photon::test::st_file(tensors, {{"format", "pt"}});
}

void safetensors_seeds(const fs::path& root) {
  SeedDir seeds(root, "safetensors");
  using photon::test::st_raw;
  using photon::test::st_tensor;
  const std::vector<float> v = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -0.125f};
  seeds.add("file-dtypes", 0,
            photon::test::st_file({st_tensor("a", "F32", {2, 3}, v), st_tensor("b", "F16", {6}, v),
                                   st_tensor("c", "BF16", {3, 2}, v)},
                                  {{"format", "pt"}}, 3));
  seeds.add("file-empty", 0, st_raw("{}", 0));
  const std::string a = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  seeds.add(
      "file-overlap", 0,
      st_raw("{" + a + R"(, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}})", 8));
  seeds.add("file-duplicate", 0, st_raw("{" + a + ", " + a + "}", 8));
  seeds.add("file-f64", 0,
            st_raw(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8));
  auto text = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  nlohmann::json mistral = hf_llama(false);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = nullptr;
  nlohmann::json scaled = hf_llama(true);
  scaled["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  seeds.add("config-llama", 1, text(hf_llama(false).dump()));
  seeds.add("config-mistral", 1, text(mistral.dump()));
  seeds.add("config-rope-scaling", 1, text(scaled.dump()));
  auto pair = [&](const std::string& json, const Bytes& weights) {
    Bytes input;
    put16(input, static_cast<uint32_t>(json.size()));
    input.insert(input.end(), json.begin(), json.end());
    input.insert(input.end(), weights.begin(), weights.end());
    return input;
  };
  for (const bool tied : {false, true}) {
    const std::string json = hf_llama(tied).dump();
    const photon::ModelConfig config = photon::hf_config_from_json(json, "config").config;
    seeds.add(std::string("convert-llama") + (tied ? "-tied" : ""), 2,
              pair(json, checkpoint(config, tied ? "F32" : "BF16", [tied](const std::string& n) {
                     return photon::hf_tensor_name(n, tied);
                   })));
  }
  const photon::ModelConfig sdk = tiny_config(1);  // kTinyVocab: tests/data/tiny.model's pieces
  seeds.add("convert-sdk-l1", 2,
            pair(photon::config_to_json(sdk),
                 checkpoint(sdk, "F16", [](const std::string& n) { return n; })));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  photon::hardening::TempDir tmp;
  model_seeds(root, tmp);
  state_seeds(root);
  generate_seeds(root);
  convert_seeds(root);
  safetensors_seeds(root);
  return 0;
}
