// photon init: a model with seeded random weights from a preset or a config file, and the list of
// presets with their exact parameter counts.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

std::string preset_config(const std::string& name) {
  size_t length = 0;
  photon_status status = photon_preset_config(name.c_str(), nullptr, 0, &length);
  if (status != PHOTON_ERR_BUFFER_TOO_SMALL) {
    if (status == PHOTON_ERR_INVALID_ARGUMENT) {
      throw UsageError("--preset: unknown preset '" + name + "' (see --list-presets)");
    }
    check(status, "cannot read preset '" + name + "'");
  }
  std::string json(length + 1, '\0');
  check(photon_preset_config(name.c_str(), json.data(), json.size(), &length),
        "cannot read preset '" + name + "'");
  json.resize(length);
  return json;
}

uint64_t parameter_count(const std::string& config_json, const std::string& origin) {
  uint64_t count = 0;
  check(photon_config_parameter_count(config_json.c_str(), &count),
        "invalid configuration " + origin);
  return count;
}

// "photon, 2 levels" / "vanilla, 16 layers", from the configuration JSON.
std::string describe(const std::string& config_json) {
  const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return "";
  const std::string arch = config.value("arch", "");
  if (arch == "photon" && config.contains("levels") && config["levels"].is_array()) {
    const size_t levels = config["levels"].size();
    return arch + ", " + std::to_string(levels) + (levels == 1 ? " level" : " levels");
  }
  if (arch == "vanilla" && config.contains("layers") && config["layers"].is_number_integer()) {
    return arch + ", " + std::to_string(config["layers"].get<int64_t>()) + " layers";
  }
  return arch;
}

int list_presets() {
  for (size_t i = 0; const char* name = photon_preset_name(i); ++i) {
    const std::string json = preset_config(name);
    std::printf(
        "%-14s %14llu  %s\n", name,
        static_cast<unsigned long long>(parameter_count(json, "of preset " + std::string(name))),
        describe(json).c_str());
  }
  return 0;
}

int run_init(const std::vector<std::string>& argv) {
  Args args({{"preset"},
             {"config"},
             {"tokenizer"},
             {"dtype"},
             {"seed"},
             {"output", 'o'},
             {"list-presets", 0, false}},
            0);
  args.parse(argv);
  if (args.has("list-presets")) return list_presets();

  const bool has_preset = args.has("preset");
  if (has_preset == args.has("config")) {
    throw UsageError("give exactly one of --preset NAME and --config C.json");
  }
  const std::string output = args.required("output");
  std::string json;
  std::string origin;
  if (has_preset) {
    const std::string name = *args.value("preset");
    json = preset_config(name);
    origin = "of preset '" + name + "'";
  } else {
    const std::string path = *args.value("config");
    json = read_file(path, "config");
    origin = "'" + path + "'";
  }
  const uint64_t parameters = parameter_count(json, origin);

  ProgressBar bar("writing");
  WriteOptionsPtr options = make_write_options(args, &bar);
  // Provenance: with the preset (or the config) and the seed, the file can be written again.
  const std::string seed = args.value("seed").value_or("0");
  check(photon_write_options_set_metadata(options.get(), "seed", seed.c_str()),
        "cannot record the seed");
  check(photon_write_options_set_metadata(
            options.get(), has_preset ? "preset" : "source",
            has_preset ? args.value("preset")->c_str() : args.value("config")->c_str()),
        "cannot record the configuration's origin");
  check(photon_model_init_random(json.c_str(), output.c_str(), options.get()),
        "cannot write '" + output + "'");
  bar.finish();
  std::fprintf(stderr, "photon init: wrote %s (%s parameters, %s)\n", output.c_str(),
               group_digits(parameters).c_str(), describe(json).c_str());
  return 0;
}

}  // namespace

const Command kInitCommand = {
    "init", "write a model with seeded random weights (tests, benchmarks)",
    "usage: photon init (--preset NAME | --config C.json) [--tokenizer T.model]\n"
    "                   [--dtype f32|f16|bf16|q8] [--seed S] -o M.photon\n"
    "       photon init --list-presets\n"
    "\n"
    "Writes a model whose weights are random (normal, std 0.02; norms one, biases zero), drawn\n"
    "from a seed, for the configuration of a built-in preset or a config.json (spec section 8).\n"
    "\n"
    "options:\n"
    "  --preset NAME        a built-in configuration (see --list-presets)\n"
    "  --config C.json      a configuration file\n"
    "  --tokenizer T.model  sentencepiece model to embed (default: the SDK's built-in one)\n"
    "  --dtype D            storage type of the weights: f32 (default), f16, bf16 or q8\n"
    "  --seed S             seed of the weights (default 0)\n"
    "  -o, --output M.photon  file to write (required)\n"
    "  --list-presets       print every preset with its exact parameter count and exit\n",
    run_init};

}  // namespace photon::cli
