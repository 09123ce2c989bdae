// photon convert: config.json + weights.npz (+ tokenizer) -> .photon.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

constexpr const char* kProbeText = "In the beginning";

// The tokenizer embedded in the model file at `path`, or nothing when it is not a loadable model.
std::optional<std::string> embedded_tokenizer(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return std::nullopt;
  photon_model* raw = nullptr;
  if (photon_model_load(path.c_str(), nullptr, &raw) != PHOTON_OK) return std::nullopt;
  const ModelPtr model(raw);
  return tokenizer_model(model.get());
}

// The ids of the same text under two tokenizers, for the warning: "beginning" -> 1107 / 1119.
std::string ids_of(const std::string& path, const std::string& text) {
  photon_model* raw = nullptr;
  if (photon_model_load(path.c_str(), nullptr, &raw) != PHOTON_OK) return "?";
  const ModelPtr model(raw);
  std::string ids;
  for (int32_t id : tokenize(model.get(), text, false))
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return ids;
}

int run_convert(const std::vector<std::string>& argv) {
  Args args({{"config"}, {"weights"}, {"tokenizer"}, {"output", 'o'}, {"dtype"}, {"meta"}}, 0);
  args.parse(argv);
  const std::string config = args.required("config");
  const std::string weights = args.required("weights");
  const std::string output = args.required("output");

  ProgressBar bar("converting");
  WriteOptionsPtr options = make_write_options(args, &bar);
  for (const std::string& entry : args.values("meta")) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      throw UsageError("--meta: expected KEY=VALUE, got '" + entry + "'");
    const std::string key = entry.substr(0, equals), value = entry.substr(equals + 1);
    check_setting(photon_write_options_set_metadata(options.get(), key.c_str(), value.c_str()),
                  "--meta");
  }
  // A model file this replaces: token ids that callers stored for it must keep their meaning.
  const std::optional<std::string> replaced = embedded_tokenizer(output);
  std::string replaced_ids;
  if (replaced) replaced_ids = ids_of(output, kProbeText);
  check(photon_model_convert(config.c_str(), weights.c_str(), output.c_str(), options.get()),
        "conversion failed");

  bar.finish();
  if (replaced && embedded_tokenizer(output) != replaced) {
    std::fprintf(stderr,
                 "photon convert: warning: %s replaced a model file made with another tokenizer: "
                 "the same text now gives other token ids (\"%s\": %s before, %s now); weights "
                 "trained with the old tokenizer need it back (photon inspect OLD.photon "
                 "--extract-tokenizer T.model, then --tokenizer T.model)\n",
                 output.c_str(), kProbeText, replaced_ids.c_str(),
                 ids_of(output, kProbeText).c_str());
  }
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(output, error);
  std::fprintf(stderr, "photon convert: wrote %s (%s)\n", output.c_str(),
               error ? "size unknown" : human_bytes(size).c_str());
  return 0;
}

}  // namespace

const Command kConvertCommand = {
    "convert", "build a .photon model from config.json + weights.npz",
    "usage: photon convert --config C.json --weights W.npz [--tokenizer T.model] -o M.photon\n"
    "                      [--dtype f32|f16|bf16] [--meta KEY=VALUE ...]\n"
    "\n"
    "Builds a model file from the interchange format: a configuration (spec section 8) and an\n"
    "npz archive of float32/float16 arrays named as in spec section 6 (every tensor the\n"
    "configuration needs, with its exact shape, and no other).\n"
    "\n"
    "options:\n"
    "  --config C.json      model configuration (required)\n"
    "  --weights W.npz      weights (required)\n"
    "  --tokenizer T.model  sentencepiece model to embed (default: the SDK's built-in one);\n"
    "                       the weights' own tokenizer, the one they were trained with (a model\n"
    "                       file's: photon inspect M.photon --extract-tokenizer T.model). When\n"
    "                       -o replaces a model made with another tokenizer, a warning says so\n"
    "  -o, --output M.photon  file to write (required; written atomically)\n"
    "  --dtype f32|f16|bf16 storage type of the weights (default f32)\n"
    "  --meta KEY=VALUE     a metadata entry for the file's header (repeatable; `photon inspect`\n"
    "                       lists them), e.g. what the trainer measured\n",
    run_convert};

}  // namespace photon::cli
