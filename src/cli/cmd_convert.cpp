// photon convert: config.json + weights.npz, or a safetensors checkpoint (+ tokenizer) -> .photon.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

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
  check(from ? photon_model_convert_from(from->c_str(), config.empty() ? nullptr : config.c_str(),
                                         output.c_str(), options.get())
             : photon_model_convert(config.c_str(), weights.c_str(), output.c_str(), options.get()),
        "conversion failed");

  bar.finish();
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(output, error);
  std::fprintf(stderr, "photon convert: wrote %s (%s)\n", output.c_str(),
               error ? "size unknown" : human_bytes(size).c_str());
  return 0;
}

}  // namespace

const Command kConvertCommand = {
    "convert", "build a .photon model from config.json + weights.npz or safetensors",
    "usage: photon convert --config C.json --weights W.npz [--tokenizer T.model] -o M.photon\n"
    "                      [--dtype f32|f16|bf16] [--meta KEY=VALUE ...]\n"
    "       photon convert --from DIR|W.safetensors [--config C.json] [--tokenizer T.model]\n"
    "                      -o M.photon [--dtype f32|f16|bf16] [--meta KEY=VALUE ...]\n"
    "\n"
    "Builds a model file from the interchange format: a configuration (spec section 8) and an\n"
    "npz archive of float32/float16 arrays named as in spec section 6 (every tensor the\n"
    "configuration needs, with its exact shape, and no other).\n"
    "\n"
    "With --from, from a safetensors checkpoint: a directory with config.json, model.safetensors\n"
    "(or shards and model.safetensors.index.json) and tokenizer.model, as Hugging Face and the\n"
    "SDK's trainer write them, or one .safetensors file with --config. A Hugging Face\n"
    "LlamaForCausalLM or MistralForCausalLM becomes a vanilla model; what the engine cannot run\n"
    "exactly (rope_scaling, sliding windows, biases, ...) is refused, naming the field.\n"
    "\n"
    "options:\n"
    "  --config C.json      model configuration (required with --weights; with --from, default\n"
    "                       DIR/config.json)\n"
    "  --weights W.npz      weights (required unless --from)\n"
    "  --from PATH          a safetensors checkpoint directory or file, instead of --weights\n"
    "  --tokenizer T.model  sentencepiece model to embed (default: with --from, tokenizer.model\n"
    "                       beside the weights; else the SDK's built-in one)\n"
    "  -o, --output M.photon  file to write (required; written atomically)\n"
    "  --dtype f32|f16|bf16 storage type of the weights (default f32)\n"
    "  --meta KEY=VALUE     a metadata entry for the file's header (repeatable; `photon inspect`\n"
    "                       lists them), e.g. what the trainer measured\n",
    run_convert};

}  // namespace photon::cli
