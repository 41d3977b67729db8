// safetensors IO with Hugging Face tensor names and layouts:
//   llama family as LlamaForCausalLM, gpt2 family as GPT2LMHeadModel.
// The loader is a pure function from bytes to weights-or-error so that it can
// be fuzzed: every header field, offset, shape and dtype is checked, and a
// malformed or truncated file yields a message, never a crash.
// See docs/WEIGHTS.md for the name mapping and the extensions.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck {

// The header's metadata entry, and the key in it under which kvcheck stores
// its Config as JSON (docs/WEIGHTS.md); read and written by the two halves of
// the codec (safetensors.cpp, safetensors_write.cpp).
inline constexpr std::string_view kSafetensorsMetadataKey = "__metadata__";
inline constexpr std::string_view kSafetensorsConfigKey = "kvcheck.config";

// One tensor of a safetensors file as its header describes it, checked
// against the file: its byte range lies inside the data section and holds
// exactly shape x dtype bytes.
struct SafetensorsTensor {
  std::string dtype;               // as the header names it: "F32", "BF16", "U8", "BOOL", ...
  std::vector<uint64_t> shape;     // row-major
  uint64_t begin = 0, end = 0;     // byte range [begin, end) within the data section
  std::span<const uint8_t> bytes;  // [end - begin] those bytes, inside the caller's buffer
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsTensor> tensors;  // sorted by name: errors are deterministic
  std::map<std::string, std::string> metadata;       // __metadata__
  std::span<const uint8_t> data;                     // the data section, after the header
};

// The framing of any safetensors file, without a config: header length,
// JSON (no duplicate keys), every entry's dtype (any of the specification),
// shape and offsets, and the data section tiled exactly. The spans point into
// `bytes`, which must outlive the result.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes);

// The same through the JSON library's DOM alone: the reader that decides
// whenever the streaming one gives up, and that names every problem.
// Exposed so that safetensors_fuzz can hold the two equal.
Result<SafetensorsHeader> parse_safetensors_header_dom(std::span<const uint8_t> bytes);

// Widens one F32, F16 or BF16 tensor into out [elements]; otherwise a message
// naming the tensor and its dtype.
std::string decode_tensor(const std::string& name, const SafetensorsTensor& tensor,
                          std::span<float> out);

// Tensors under their Hugging Face names (model/tensor_layout.cpp) checked
// against `config`, every one present with its shape, F32/F16/BF16, and no
// other, then converted to the canonical layout. Errors name the tensor.
Result<Weights> weights_from_hf_tensors(const std::map<std::string, SafetensorsTensor>& tensors,
                                        const Config& config);

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
