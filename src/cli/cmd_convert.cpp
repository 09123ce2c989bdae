// photon convert: config.json + weights.npz (+ tokenizer) -> .photon.
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

int run_convert(const std::vector<std::string>& argv) {
  Args args({{"config"}, {"weights"}, {"tokenizer"}, {"output", 'o'}, {"dtype"}}, 0);
  args.parse(argv);
  const std::string config = args.required("config");
  const std::string weights = args.required("weights");
  const std::string output = args.required("output");

  ProgressBar bar("converting");
  WriteOptionsPtr options = make_write_options(args, &bar);
  check(photon_model_convert(config.c_str(), weights.c_str(), output.c_str(), options.get()),
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
    "convert", "build a .photon model from config.json + weights.npz",
    "usage: photon convert --config C.json --weights W.npz [--tokenizer T.model] -o M.photon\n"
    "                      [--dtype f32|f16|bf16]\n"
    "\n"
    "Builds a model file from the interchange format: a configuration (spec section 8) and an\n"
    "npz archive of float32/float16 arrays named as in spec section 6 (every tensor the\n"
    "configuration needs, with its exact shape, and no other).\n"
    "\n"
    "options:\n"
    "  --config C.json      model configuration (required)\n"
    "  --weights W.npz      weights (required)\n"
    "  --tokenizer T.model  sentencepiece model to embed (default: the SDK's built-in one)\n"
    "  -o, --output M.photon  file to write (required; written atomically)\n"
    "  --dtype f32|f16|bf16 storage type of the weights (default f32)\n",
    run_convert};

}  // namespace photon::cli
