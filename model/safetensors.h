// safetensors IO with Hugging Face tensor names and layouts:
//   llama family as LlamaForCausalLM, gpt2 family as GPT2LMHeadModel.
// The loader is a pure function from bytes to weights-or-error so that it can
// be fuzzed: every header field, offset, shape and dtype is checked, and a
// malformed or truncated file yields a message, never a crash.
// See docs/WEIGHTS.md for the name mapping and the extensions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck {

struct ModelFile {
  Config config;
  Weights weights;
};

// Reads the config from the header's __metadata__ and the tensors from the
// data section. F32 always; BF16 and F16 are widened to float on read.
Result<ModelFile> load_safetensors(std::span<const uint8_t> bytes);

// Same, but the file must describe exactly `expected`.
Result<Weights> load_safetensors(std::span<const uint8_t> bytes, const Config& expected);

// F32, with the config in __metadata__ under "kvcheck.config" as JSON.
// Throws InputError if the config does not validate or the weights do not
// have its shapes (check_shapes), since no file could describe them.
std::vector<uint8_t> save_safetensors(const Config& config, const Weights& weights);

Result<ModelFile> load_safetensors_file(const std::string& path);
// Atomic: writes a temporary file beside `path`, then renames it.
// Returns an empty string on success, else a message naming the path.
std::string save_safetensors_file(const std::string& path, const Config& config,
                                  const Weights& weights);

}  // namespace kvcheck
