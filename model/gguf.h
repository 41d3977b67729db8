// GGUF v3 writer: a config's weights as llama.cpp loads them, so that
// llama.cpp can run exactly the model the harness runs.
//   llama family -> architecture "llama"; q/k rows permuted per head for RoPE
//                   NORM mode (llama.cpp rotates adjacent pairs, kvcheck
//                   rotates halves).
//   gpt2 family  -> architecture "gpt2"; only when n_heads*head_dim == d_model
//                   (see gguf_unsupported).
// Every tensor is f32, alignment 32, with a byte-level "gpt2" tokenizer.
// Layout and keys: docs/WEIGHTS.md, "GGUF files".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// Empty when llama.cpp has an architecture that computes this config's model;
// otherwise why not, naming the fields.
std::string gguf_unsupported(const Config& config);

// The text of token `id` in the file's vocabulary: ids 0..255 are GPT-2's
// byte-level symbols for bytes 0..255 (UTF-8), larger ids "<|kvcheck_ID|>".
std::string gguf_token_text(int id);

// The whole file. Throws InputError when the config does not validate, the
// weights do not have its shapes, or gguf_unsupported says why not.
std::vector<uint8_t> save_gguf(const Config& config, const Weights& weights);

// Atomic (write_file_atomically). Returns an empty string on success, else a
// message naming the path.
std::string save_gguf_file(const std::string& path, const Config& config, const Weights& weights);

}  // namespace kvcheck
