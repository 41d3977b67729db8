// A Hugging Face config.json as a KvShape, for `kvcheck memory --config`.
// GPT-2 style configs name the fields n_layer/n_embd/n_head/n_positions;
// Llama-like ones (Llama, Mistral, Qwen2, ...) num_hidden_layers/hidden_size/
// num_attention_heads/num_key_value_heads/head_dim/max_position_embeddings/
// sliding_window. Unknown fields are ignored (real configs carry dozens).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/kv_memory.h"
#include "model/status.h"

namespace kvcheck {

// `name` prefixes every error and becomes the shape's name. Errors name the
// field and quote the value.
Result<KvShape> kv_shape_from_hf_config(const nlohmann::json& config, const std::string& name);

// Reads and parses the file; errors name the path.
Result<KvShape> read_hf_config_file(const std::string& path);

}  // namespace kvcheck
