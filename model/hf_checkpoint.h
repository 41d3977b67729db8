// Hugging Face checkpoint folders (`--model DIR`): config.json with
// GPT2Config or LlamaConfig field names, and model.safetensors (or the shards
// model.safetensors.index.json names). The loader accepts what real
// checkpoints contain (tied embeddings, names without the transformer./model.
// prefix, GPT-2's attn.bias/attn.masked_bias buffers, Llama's
// rotary_emb.inv_freq) and refuses, by name and value, any config field or
// tensor that would make kvcheck compute a different model than the one the
// files describe. See docs/MODELS.md.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/status.h"

namespace kvcheck {

// What config.json says beyond the Config: whether the head is tied.
struct HfModelConfig {
  Config config;
  bool tie_word_embeddings = false;
};

// config.json -> Config. `name` prefixes every error (the file's path).
// Errors name the field and quote its value.
Result<HfModelConfig> hf_model_config(const nlohmann::json& config, const std::string& name);

// Reads the folder: config, tensors, and the hash of the files read. Errors
// name the file, field or tensor.
Result<Checkpoint> load_hf_checkpoint(const std::string& folder);

}  // namespace kvcheck
