// photon convert: config.json + weights.npz, or a safetensors checkpoint (+ tokenizer) -> .photon.
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
  Args args(
      {{"config"}, {"weights"}, {"from"}, {"tokenizer"}, {"output", 'o'}, {"dtype"}, {"meta"}}, 0);
  args.parse(argv);
  const std::optional<std::string> from = args.value("from");
  if (from && args.has("weights")) throw UsageError("give --from or --weights, not both");
  const std::string config = from ? args.value("config").value_or("") : args.required("config");
  const std::string weights = from ? "" : args.required("weights");
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
  check(from ? photon_model_convert_from(from->c_str(), config.empty() ? nullptr : config.c_str(),
                                         output.c_str(), options.get())
             : photon_model_convert(config.c_str(), weights.c_str(), output.c_str(), options.get()),
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
    "convert", "build a .photon model from config.json + weights.npz, safetensors or a model",
    "usage: photon convert --config C.json --weights W.npz [--tokenizer T.model] -o M.photon\n"
    "                      [--dtype f32|f16|bf16|q8] [--meta KEY=VALUE ...]\n"
    "       photon convert --from DIR|W.safetensors [--config C.json] [--tokenizer T.model]\n"
    "                      -o M.photon [--dtype f32|f16|bf16|q8] [--meta KEY=VALUE ...]\n"
    "       photon convert --from M.photon -o OUT.photon --dtype q8 [--meta KEY=VALUE ...]\n"
    "\n"
    "Builds a model file from the interchange format: a configuration (spec section 8) and an\n"
    "npz archive of float32/float16 arrays named as in spec section 6 (every tensor the\n"
    "configuration needs, with its exact shape, and no other).\n"
    "\n"
    "With --from, from a safetensors checkpoint: a directory with config.json, model.safetensors\n"
    "(or shards and model.safetensors.index.json) and tokenizer.model, as Hugging Face and the\n"
    "SDK's trainer write them, or one .safetensors file with --config. A Hugging Face\n"
    "LlamaForCausalLM or MistralForCausalLM becomes a vanilla model; what the engine cannot run\n"
    "exactly (rope_scaling, sliding windows, biases, ...) is refused, naming the field. From a\n"
    ".photon file, its tensors are stored again as --dtype says (quantizing it to q8, say),\n"
    "with its configuration, tokenizer and metadata.\n"
    "\n"
    "options:\n"
    "  --config C.json      model configuration (required with --weights; with --from, default\n"
    "                       DIR/config.json)\n"
    "  --weights W.npz      weights (required unless --from)\n"
    "  --from PATH          a safetensors checkpoint directory or file, or a .photon model,\n"
    "                       instead of --weights\n"
    "  --tokenizer T.model  sentencepiece model to embed (default: with --from, tokenizer.model\n"
    "                       beside the weights; else the SDK's built-in one): the weights' own\n"
    "                       tokenizer, the one they were trained with (a model file's: photon\n"
    "                       inspect M.photon --extract-tokenizer T.model). When -o replaces a\n"
    "                       model made with another tokenizer, a warning says so\n"
    "  -o, --output M.photon  file to write (required; written atomically)\n"
    "  --dtype D            storage type of the weights: f32 (default), f16, bf16 or q8\n"
    "  --meta KEY=VALUE     a metadata entry for the file's header (repeatable; `photon inspect`\n"
    "                       lists them), e.g. what the trainer measured\n",
    run_convert};

}  // namespace photon::cli
