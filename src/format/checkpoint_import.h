// safetensors checkpoints -> .photon, tensor by tensor. A checkpoint is a directory holding
// config.json, the weights (model.safetensors, or the shards model.safetensors.index.json lists)
// and tokenizer.model, as Hugging Face and the SDK's trainer write them; or one .safetensors file
// with a configuration given beside it. The configuration is either the SDK's interchange one
// (spec section 8; tensors named as in spec section 6) or a Hugging Face LlamaForCausalLM /
// MistralForCausalLM config.json (format/hf_config.h).
#pragma once

#include <string>

#include "format/model_writer.h"

namespace photon {

struct CheckpointSource {
  std::string path;            // a directory, or a .safetensors file
  std::string config_path;     // empty: path/config.json (a directory only)
  std::string tokenizer_path;  // empty: tokenizer.model beside the weights, else for an SDK
                               // configuration the built-in tokenizer
};

// Converts the checkpoint; the weights are read one tensor at a time from the mapped files, so
// memory stays near the largest tensor (in f32), not the model. Metadata "source",
// "source.format" and "source.config_sha256" are added unless options set them. Throws Error
// naming the file, tensor or field at fault.
void convert_checkpoint(const CheckpointSource& source, const std::string& out_path,
                        const WriteOptions& options);

}  // namespace photon
