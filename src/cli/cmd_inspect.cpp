// photon inspect: a model file's configuration, parameters per module and layout.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

using ordered_json = nlohmann::ordered_json;

struct TensorRow {
  std::string name;
  photon_dtype dtype = PHOTON_DTYPE_F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t elements = 1;
};

struct Module {
  std::string name;
  uint64_t parameters = 0;
};

// Tensors group into modules by name prefix: "enc.1.layers.0.attn.wq" -> "enc.1" (the level's
// encoder, chunker included), "dec.2.start" -> "dec.2", "layers.3.ffn.w_up" -> "layers",
// "tok_emb_enc" -> "tok_emb_enc".
std::string module_of(const std::string& tensor) {
  const size_t dot = tensor.find('.');
  const std::string head = tensor.substr(0, dot);
  if ((head == "enc" || head == "dec") && dot != std::string::npos) {
    return tensor.substr(0, tensor.find('.', dot + 1));
  }
  return head;
}

std::vector<TensorRow> read_tensors(const photon_model* model) {
  std::vector<TensorRow> rows;
  const size_t count = photon_model_tensor_count(model);
  for (size_t i = 0; i < count; ++i) {
    TensorRow row;
    const char* name = nullptr;
    int32_t n_dims = 0;
    int64_t shape[PHOTON_MAX_DIMS] = {};
    check(photon_model_tensor_info(model, i, &name, &row.dtype, &n_dims, shape, &row.offset,
                                   &row.bytes),
          "cannot read tensor " + std::to_string(i));
    row.name = name != nullptr ? name : "";
    for (int32_t d = 0; d < n_dims && d < PHOTON_MAX_DIMS; ++d) {
      row.shape.push_back(shape[d]);
      row.elements *= static_cast<uint64_t>(shape[d]);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<Module> group_modules(const std::vector<TensorRow>& tensors) {
  std::vector<Module> modules;  // in order of first appearance in the file
  for (const TensorRow& tensor : tensors) {
    const std::string name = module_of(tensor.name);
    auto it = std::find_if(modules.begin(), modules.end(),
                           [&](const Module& m) { return m.name == name; });
    if (it == modules.end()) it = modules.insert(modules.end(), Module{name, 0});
    it->parameters += tensor.elements;
  }
  return modules;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

void print_json(const std::string& path, const photon_model* model, uint64_t file_size,
                const std::vector<TensorRow>& tensors, const std::vector<Module>& modules,
                bool verified) {
  ordered_json out;
  out["path"] = path;
  out["arch"] = photon_model_arch(model);
  out["levels"] = photon_model_levels(model);
  out["vocab_size"] = photon_model_vocab_size(model);
  out["context_length"] = photon_model_context_length(model);
  out["bos"] = photon_model_bos(model);
  out["eos"] = photon_model_eos(model);
  const char* config_text = photon_model_config_json(model);
  ordered_json config = ordered_json::parse(config_text, nullptr, false);
  out["config"] = config.is_discarded() ? ordered_json(config_text) : config;
  out["parameters"] = photon_model_parameter_count(model);
  ordered_json module_counts = ordered_json::object();
  for (const Module& module : modules) module_counts[module.name] = module.parameters;
  out["modules"] = module_counts;
  ordered_json rows = ordered_json::array();
  for (const TensorRow& tensor : tensors) {
    rows.push_back({{"name", tensor.name},
                    {"dtype", dtype_name(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"offset", tensor.offset},
                    {"bytes", tensor.bytes}});
  }
  out["file"] = {
      {"size", file_size}, {"data_offset", photon_model_data_offset(model)}, {"tensors", rows}};
  ordered_json metadata = ordered_json::object();
  for (size_t i = 0; i < photon_model_metadata_count(model); ++i) {
    const char *key = nullptr, *value = nullptr;
    if (photon_model_metadata_at(model, i, &key, &value) == PHOTON_OK) metadata[key] = value;
  }
  out["metadata"] = metadata;
  if (verified) out["verified"] = true;
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_human(const std::string& path, const photon_model* model, uint64_t file_size,
                 const std::vector<TensorRow>& tensors, const std::vector<Module>& modules,
                 bool verified) {
  const uint64_t total = photon_model_parameter_count(model);
  std::printf("model        %s (%s)\n", path.c_str(), human_bytes(file_size).c_str());
  const std::string arch = photon_model_arch(model);
  if (arch == "photon") {
    const int32_t levels = photon_model_levels(model);
    std::printf("arch         photon, %d level%s%s\n", levels, levels == 1 ? "" : "s",
                levels == 1 ? " (Block Transformer)" : "");
  } else {
    std::printf("arch         %s\n", arch.c_str());
  }
  std::printf("vocabulary   %d (bos %d, eos %d)\n", photon_model_vocab_size(model),
              photon_model_bos(model), photon_model_eos(model));
  std::printf("context      %d tokens\n", photon_model_context_length(model));
  std::printf("config       %s\n", photon_model_config_json(model));
  if (verified) std::printf("verified     every weight is finite; the data matches its hash\n");

  std::printf("\nparameters   %s\n", group_digits(total).c_str());
  for (const Module& module : modules) {
    const double share =
        total > 0 ? 100.0 * static_cast<double>(module.parameters) / static_cast<double>(total)
                  : 0.0;
    std::printf("  %-14s %15s  %5.1f%%\n", module.name.c_str(),
                group_digits(module.parameters).c_str(), share);
  }

  std::printf("\nfile layout  data section at byte %llu, %zu tensors\n",
              static_cast<unsigned long long>(photon_model_data_offset(model)), tensors.size());
  size_t name_width = 4;
  for (const TensorRow& tensor : tensors) name_width = std::max(name_width, tensor.name.size());
  std::printf("  %-*s  %-5s  %-16s %12s %12s\n", static_cast<int>(name_width), "name", "dtype",
              "shape", "offset", "bytes");
  for (const TensorRow& tensor : tensors) {
    std::printf("  %-*s  %-5s  %-16s %12llu %12llu\n", static_cast<int>(name_width),
                tensor.name.c_str(), dtype_name(tensor.dtype), shape_text(tensor.shape).c_str(),
                static_cast<unsigned long long>(tensor.offset),
                static_cast<unsigned long long>(tensor.bytes));
  }

  bool header_printed = false;
  for (size_t i = 0; i < photon_model_metadata_count(model); ++i) {
    const char *key = nullptr, *value = nullptr;
    if (photon_model_metadata_at(model, i, &key, &value) != PHOTON_OK) continue;
    if (!header_printed) std::printf("\nmetadata\n");
    header_printed = true;
    std::printf("  %-12s %s\n", key, value);
  }
}

int run_inspect(const std::vector<std::string>& argv) {
  Args args({{"model", 'm'}, {"json", 0, false}, {"verify", 0, false}, {"extract-tokenizer"}}, 1);
  args.parse(argv);
  if (!args.positionals().empty() && args.has("model")) {
    throw UsageError("give the model either as an argument or with -m, not both");
  }
  const std::string path = args.positionals().empty() ? model_path(args) : args.positionals()[0];
  const bool verify = args.has("verify");
  ModelPtr model = load_model(path, {}, 0, verify);

  if (auto out = args.value("extract-tokenizer")) {
    const std::string bytes = tokenizer_model(model.get());
    write_file(*out, bytes, "the tokenizer");
    std::fprintf(stderr, "photon inspect: wrote %s (%s, the tokenizer of %s: %d pieces)\n",
                 out->c_str(), human_bytes(bytes.size()).c_str(), path.c_str(),
                 photon_model_vocab_size(model.get()));
    return 0;
  }

  std::error_code error;
  const uintmax_t file_size = std::filesystem::file_size(path, error);
  if (error) throw RuntimeFailure("cannot stat '" + path + "': " + error.message());
  const std::vector<TensorRow> tensors = read_tensors(model.get());
  const std::vector<Module> modules = group_modules(tensors);
  if (args.has("json")) {
    print_json(path, model.get(), file_size, tensors, modules, verify);
  } else {
    print_human(path, model.get(), file_size, tensors, modules, verify);
  }
  return 0;
}

}  // namespace

const Command kInspectCommand = {
    "inspect", "show a model's configuration, parameters and file layout",
    "usage: photon inspect [M.photon | -m M.photon] [--json] [--verify]\n"
    "       photon inspect [M.photon | -m M.photon] --extract-tokenizer T.model\n"
    "\n"
    "Loads and verifies a model file, then prints its configuration, its parameters per module\n"
    "(tensors grouped by name prefix: tok_emb_enc, enc.1, ..., dec.1, tok_emb_dec, lm_head for\n"
    "PHOTON; tok_emb, layers, norm, lm_head for vanilla) and in total, and the file layout: the\n"
    "data section's offset and every tensor's name, dtype, shape, offset and size.\n"
    "--extract-tokenizer writes the model's embedded tokenizer instead (a sentencepiece .model\n"
    "file: `photon convert --tokenizer` takes it to write a model with the same token ids).\n"
    "\n"
    "options:\n"
    "  -m, --model M.photon the model (default: the argument, else $PHOTON_MODEL)\n"
    "  --json               one JSON object: arch, levels, vocab_size, context_length, bos, eos,\n"
    "                       config, parameters, modules, file {size, data_offset, tensors},\n"
    "                       metadata (and verified: true with --verify)\n"
    "  --verify             also read every weight: fail if one is NaN or infinite (naming the\n"
    "                       tensor and the element) or if the data does not match its hash\n"
    "  --extract-tokenizer T.model  write the embedded tokenizer to T.model and print nothing\n"
    "                       else\n",
    run_inspect};

}  // namespace photon::cli
