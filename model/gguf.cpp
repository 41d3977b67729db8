#include "model/gguf.h"

#include <sstream>
#include <stdexcept>
#include <string_view>

#include "model/atomic_file.h"
#include "model/config_json.h"
#include "model/le_bytes.h"
#include "model/tensor_layout.h"

namespace kvcheck {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // llama.cpp's default; also written as general.alignment
constexpr int kByteTokens = 256;

// GGUF value types and the one ggml tensor type written.
enum GgufType : uint32_t {
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
};
constexpr uint32_t kGgmlF32 = 0;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenControl = 3;

// The metadata section: a count of key-value pairs, then the pairs.
class Metadata {
 public:
  void u32(std::string_view key, uint32_t value) {
    header(key, kU32);
    append_le(bytes_, value, 4);
  }
  void f32(std::string_view key, double value) {
    header(key, kF32);
    append_f32le(bytes_, static_cast<float>(value));
  }
  void boolean(std::string_view key, bool value) {
    header(key, kBool);
    bytes_.push_back(value ? 1 : 0);
  }
  void string(std::string_view key, std::string_view value) {
    header(key, kString);
    append_string(bytes_, value);
  }
  void strings(std::string_view key, const std::vector<std::string>& values) {
    array_header(key, kString, values.size());
    for (const std::string& value : values) append_string(bytes_, value);
  }
  void i32s(std::string_view key, const std::vector<int32_t>& values) {
    array_header(key, kI32, values.size());
    for (int32_t value : values) append_le(bytes_, static_cast<uint32_t>(value), 4);
  }

  uint64_t count() const { return count_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  static void append_string(std::vector<uint8_t>& out, std::string_view text) {
    append_le(out, text.size(), 8);
    out.insert(out.end(), text.begin(), text.end());
  }

 private:
  void header(std::string_view key, uint32_t type) {
    ++count_;
    append_string(bytes_, key);
    append_le(bytes_, type, 4);
  }
  void array_header(std::string_view key, uint32_t element_type, size_t n) {
    header(key, kArray);
    append_le(bytes_, element_type, 4);
    append_le(bytes_, n, 8);
  }

  uint64_t count_ = 0;
  std::vector<uint8_t> bytes_;  // [encoded pairs]
};

// UTF-8 of one code point below 0x800, all that the byte symbols need.
std::string utf8(uint32_t code_point) {
  if (code_point < 0x80) return std::string(1, static_cast<char>(code_point));
  return {static_cast<char>(0xC0 | (code_point >> 6)),
          static_cast<char>(0x80 | (code_point & 0x3F))};
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves;
// the other 68 bytes, in byte order, take code points 256, 257, ... so that
// every byte has a visible, distinct symbol.
uint32_t byte_symbol(int byte) {
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  if (printable(byte)) return static_cast<uint32_t>(byte);
  uint32_t rank = 0;
  for (int b = 0; b < byte; ++b) rank += printable(b) ? 0 : 1;
  return 256 + rank;
}

void add_hyperparameters(const Config& c, Metadata& meta) {
  const bool gpt2 = c.family == Family::kGpt2;
  const std::string arch = gpt2 ? "gpt2" : "llama";
  meta.string("general.architecture", arch);
  meta.u32("general.alignment", kAlignment);
  meta.string("kvcheck.config", config_to_json(c).dump());
  meta.u32(arch + ".context_length", static_cast<uint32_t>(c.max_pos));
  meta.u32(arch + ".embedding_length", static_cast<uint32_t>(c.d_model));
  meta.u32(arch + ".block_count", static_cast<uint32_t>(c.n_layers));
  meta.u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.d_ff));
  meta.u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  meta.u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  meta.u32(arch + ".vocab_size", static_cast<uint32_t>(c.vocab));
  if (gpt2) {
    meta.f32("gpt2.attention.layer_norm_epsilon", c.norm_eps);
    return;
  }
  meta.f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  meta.f32("llama.rope.freq_base", c.rope_theta);
  meta.u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  // llama.cpp assumes head size d_model / n_heads unless told otherwise.
  if (c.q_width() != c.d_model) {
    meta.u32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
    meta.u32("llama.attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
}

// A byte-level BPE vocabulary with no merges: token i < 256 is byte i, so any
// id in [0, vocab) is a token llama.cpp accepts and detokenizes.
void add_tokenizer(const Config& c, Metadata& meta) {
  std::vector<std::string> tokens;  // [V]
  std::vector<int32_t> types;       // [V]
  for (int id = 0; id < c.vocab; ++id) {
    tokens.push_back(gguf_token_text(id));
    types.push_back(id < kByteTokens ? kTokenNormal : kTokenControl);
  }
  meta.string("tokenizer.ggml.model", "gpt2");
  meta.string("tokenizer.ggml.pre", "default");
  meta.strings("tokenizer.ggml.tokens", tokens);
  meta.i32s("tokenizer.ggml.token_type", types);
  meta.strings("tokenizer.ggml.merges", {});
  meta.boolean("tokenizer.ggml.add_bos_token", false);
}

uint64_t padded(uint64_t offset) {
  return (offset + kAlignment - 1) / kAlignment * kAlignment;
}

// llama.cpp's gpt2 requires attn_qkv.bias; without qkv_bias it is zero, which
// computes the same model.
void add_zero_qkv_bias(const Config& c, std::vector<LayoutTensor>& layout) {
  if (c.family != Family::kGpt2 || c.qkv_bias) return;
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const std::string weight = "blk." + std::to_string(l) + ".attn_qkv.weight";
    for (size_t k = 0; k < layout.size(); ++k) {
      if (layout[k].name != weight) continue;
      const int64_t out = layout[k].out;
      LayoutTensor bias{"blk." + std::to_string(l) + ".attn_qkv.bias", false, 1, 1, out, {}, {out}};
      layout.insert(layout.begin() + static_cast<std::ptrdiff_t>(k) + 1, std::move(bias));
      break;
    }
  }
}

}  // namespace

std::string gguf_unsupported(const Config& config) {
  if (config.family != Family::kGpt2 || config.q_width() == config.d_model) return {};
  std::ostringstream out;
  out << "n_heads*head_dim: " << config.q_width() << " differs from d_model " << config.d_model
      << "; llama.cpp's gpt2 architecture requires them equal (its attn_qkv holds d_model query "
         "rows and attn_output is [d_model][d_model])";
  return out.str();
}

std::string gguf_token_text(int id) {
  if (id >= 0 && id < kByteTokens) return utf8(byte_symbol(id));
  return "<|kvcheck_" + std::to_string(id) + "|>";
}

std::vector<uint8_t> save_gguf(const Config& config, const Weights& weights) {
  if (std::string error = config.validate(); !error.empty()) {
    throw InputError("save_gguf: config: " + error);
  }
  if (std::string error = gguf_unsupported(config); !error.empty()) {
    throw InputError("save_gguf: " + error);
  }
  if (std::string error = check_shapes(config, weights); !error.empty()) {
    throw InputError("save_gguf: " + error);
  }
  const std::vector<TensorView> canonical = tensor_views(config, weights);
  Result<std::vector<LayoutTensor>> layout = file_layout(FileFormat::kGguf, config, canonical);
  if (!layout.ok()) throw std::logic_error(layout.error());
  add_zero_qkv_bias(config, layout.value());

  Metadata meta;
  add_hyperparameters(config, meta);
  add_tokenizer(config, meta);

  constexpr std::string_view kMagic = "GGUF";
  std::vector<uint8_t> out(kMagic.begin(), kMagic.end());  // [whole file]
  append_le(out, kVersion, 4);
  append_le(out, layout.value().size(), 8);
  append_le(out, meta.count(), 8);
  out.insert(out.end(), meta.bytes().begin(), meta.bytes().end());

  // Tensor infos: ggml lists dimensions innermost first, so [out][in] is {in, out}.
  uint64_t offset = 0;  // within the data section
  for (const LayoutTensor& tensor : layout.value()) {
    Metadata::append_string(out, tensor.name);
    append_le(out, tensor.shape.size(), 4);
    for (auto dim = tensor.shape.rbegin(); dim != tensor.shape.rend(); ++dim) {
      append_le(out, static_cast<uint64_t>(*dim), 8);
    }
    append_le(out, kGgmlF32, 4);
    append_le(out, offset, 8);
    offset = padded(offset + 4 * static_cast<uint64_t>(tensor.elements()));
  }
  out.resize(padded(out.size()), 0);

  std::vector<float> values;  // [tensor.elements()] one tensor in file layout
  for (const LayoutTensor& tensor : layout.value()) {
    values.assign(static_cast<size_t>(tensor.elements()), 0.0f);
    pack(tensor, canonical, values);
    append_f32le(out, values);
    out.resize(padded(out.size()), 0);
  }
  return out;
}

std::string save_gguf_file(const std::string& path, const Config& config, const Weights& weights) {
  return write_file_atomically_from(path, [&] { return save_gguf(config, weights); });
}

}  // namespace kvcheck
