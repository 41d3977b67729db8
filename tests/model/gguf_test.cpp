// save_gguf read back by a small GGUF parser written here from the format's
// definition (ggml's gguf.h: little-endian, strings as u64 length + bytes,
// typed key-value pairs, tensor infos with ggml dimensions innermost first,
// data aligned to general.alignment). llama.cpp's own reader checks the same
// files in adapters/llama.cpp/test/gguf_readback.mjs.
#include "model/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <variant>

#include <nlohmann/json.hpp>

#include "model/config_json.h"

namespace kvcheck {
namespace {

// ---------------------------------------------------------------------------
// The independent reader.

using Strings = std::vector<std::string>;
using Ints = std::vector<int32_t>;
using Value = std::variant<uint32_t, int32_t, float, bool, std::string, Strings, Ints>;

struct TensorInfo {
  std::vector<uint64_t> dims;  // ggml order: innermost first
  uint32_t type = 0;
  uint64_t offset = 0;  // within the data section
};

struct Gguf {
  uint32_t version = 0;
  std::map<std::string, Value> kv;
  std::vector<std::string> kv_order;
  std::map<std::string, TensorInfo> tensors;
  std::vector<std::string> tensor_order;
  uint64_t data_start = 0;     // file offset of the data section
  std::vector<uint8_t> bytes;  // [file size] a copy, so that a temporary file may be parsed

  // One f32 tensor's values, row-major as ggml stores them.
  std::vector<float> floats(const std::string& name) const {
    const TensorInfo& t = tensors.at(name);
    uint64_t n = 1;
    for (uint64_t d : t.dims) n *= d;
    std::vector<float> out(n);
    if (data_start + t.offset + 4 * n > bytes.size()) throw std::runtime_error(name + " past end");
    std::memcpy(out.data(), bytes.data() + data_start + t.offset, 4 * n);
    return out;
  }
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  uint64_t pos() const { return pos_; }

  uint64_t uint(int n) {
    if (pos_ + n > bytes_.size()) throw std::runtime_error("truncated");
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = v << 8 | bytes_[pos_ + k];
    pos_ += n;
    return v;
  }
  std::string string() {
    const uint64_t n = uint(8);
    if (pos_ + n > bytes_.size()) throw std::runtime_error("truncated string");
    std::string s(bytes_.begin() + pos_, bytes_.begin() + pos_ + n);
    pos_ += n;
    return s;
  }
  Value value(uint32_t type) {
    switch (type) {
      case 4:
        return static_cast<uint32_t>(uint(4));
      case 5:
        return static_cast<int32_t>(uint(4));
      case 6:
        return std::bit_cast<float>(static_cast<uint32_t>(uint(4)));
      case 7:
        return uint(1) != 0;
      case 8:
        return string();
      case 9:
        return array();
    }
    throw std::runtime_error("unexpected value type " + std::to_string(type));
  }

 private:
  Value array() {
    const uint32_t type = static_cast<uint32_t>(uint(4));
    const uint64_t n = uint(8);
    if (type == 8) {
      Strings s;
      for (uint64_t k = 0; k < n; ++k) s.push_back(string());
      return s;
    }
    if (type != 5) throw std::runtime_error("unexpected array type " + std::to_string(type));
    Ints v;
    for (uint64_t k = 0; k < n; ++k) v.push_back(static_cast<int32_t>(uint(4)));
    return v;
  }

  const std::vector<uint8_t>& bytes_;
  uint64_t pos_ = 0;
};

Gguf parse(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  Gguf g;
  g.bytes = bytes;
  if (r.uint(4) != 0x46554747) throw std::runtime_error("bad magic");  // "GGUF"
  g.version = static_cast<uint32_t>(r.uint(4));
  const uint64_t n_tensors = r.uint(8), n_kv = r.uint(8);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.string();
    const uint32_t type = static_cast<uint32_t>(r.uint(4));
    if (!g.kv.emplace(key, r.value(type)).second) throw std::runtime_error("duplicate " + key);
    g.kv_order.push_back(key);
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    std::string name = r.string();
    TensorInfo t;
    const uint32_t n_dims = static_cast<uint32_t>(r.uint(4));
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.uint(8));
    t.type = static_cast<uint32_t>(r.uint(4));
    t.offset = r.uint(8);
    if (!g.tensors.emplace(name, t).second) throw std::runtime_error("duplicate " + name);
    g.tensor_order.push_back(name);
  }
  g.data_start = (r.pos() + 31) / 32 * 32;
  for (uint64_t p = r.pos(); p < g.data_start; ++p) {
    if (bytes.at(p) != 0) throw std::runtime_error("non-zero padding before data");
  }
  return g;
}

// ---------------------------------------------------------------------------
// Configs and helpers.

Config llama_gqa() {
  Config c = llama_tiny();
  c.vocab = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.d_model = 32;
  c.rope_theta = 12345.5;
  c.norm_eps = 1e-6;
  return c;
}

Config gpt2_gqa(bool qkv_bias) {
  Config c = gpt2_tiny();
  c.vocab = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = c.d_model / 4;
  c.qkv_bias = qkv_bias;
  return c;
}

uint32_t u32(const Gguf& g, const std::string& key) {
  return std::get<uint32_t>(g.kv.at(key));
}
float f32(const Gguf& g, const std::string& key) {
  return std::get<float>(g.kv.at(key));
}
std::string str(const Gguf& g, const std::string& key) {
  return std::get<std::string>(g.kv.at(key));
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want[k]))
        << what << " element " << k;
  }
}

// ---------------------------------------------------------------------------
// Framing: header, alignment, offsets.

TEST(Gguf, HeaderAndDataSectionAreWellFormed) {
  const Config c = llama_gqa();
  const std::vector<uint8_t> bytes = save_gguf(c, init_weights(c, 7));
  const Gguf g = parse(bytes);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(u32(g, "general.alignment"), 32u);
  EXPECT_EQ(g.data_start % 32, 0u);
  // Tensors follow each other in file order, each starting 32-aligned right
  // after the previous one's padded end, and the file ends after the last.
  uint64_t expected = 0;
  for (const std::string& name : g.tensor_order) {
    const TensorInfo& t = g.tensors.at(name);
    EXPECT_EQ(t.type, 0u) << name << " is f32";
    EXPECT_EQ(t.offset, expected) << name;
    uint64_t n = 1;
    for (uint64_t d : t.dims) n *= d;
    expected = (t.offset + 4 * n + 31) / 32 * 32;
  }
  EXPECT_EQ(bytes.size(), g.data_start + expected);
}

TEST(Gguf, SameInputGivesSameBytes) {
  const Config c = llama_gqa();
  EXPECT_EQ(save_gguf(c, init_weights(c, 3)), save_gguf(c, init_weights(c, 3)));
  EXPECT_NE(save_gguf(c, init_weights(c, 3)), save_gguf(c, init_weights(c, 4)));
}

// ---------------------------------------------------------------------------
// Metadata.

TEST(Gguf, LlamaHyperparameters) {
  const Config c = llama_gqa();
  const Gguf g = parse(save_gguf(c, init_weights(c, 1)));
  EXPECT_EQ(str(g, "general.architecture"), "llama");
  EXPECT_EQ(g.kv_order.front(), "general.architecture");
  EXPECT_EQ(u32(g, "llama.context_length"), static_cast<uint32_t>(c.max_pos));
  EXPECT_EQ(u32(g, "llama.embedding_length"), 32u);
  EXPECT_EQ(u32(g, "llama.block_count"), static_cast<uint32_t>(c.n_layers));
  EXPECT_EQ(u32(g, "llama.feed_forward_length"), static_cast<uint32_t>(c.d_ff));
  EXPECT_EQ(u32(g, "llama.attention.head_count"), 4u);
  EXPECT_EQ(u32(g, "llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(u32(g, "llama.rope.dimension_count"), 8u);
  EXPECT_EQ(f32(g, "llama.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_EQ(f32(g, "llama.rope.freq_base"), 12345.5f);
  // H*D == E: llama.cpp's default head size is right, so no key_length.
  EXPECT_FALSE(g.kv.contains("llama.attention.key_length"));
  EXPECT_FALSE(g.kv.contains("llama.attention.value_length"));
  const Result<Config> stored = config_from_json(nlohmann::json::parse(str(g, "kvcheck.config")));
  ASSERT_TRUE(stored.ok()) << stored.error();
  EXPECT_EQ(stored.value(), c);
}

TEST(Gguf, HeadSizeIsWrittenWhenQueryWidthDiffersFromModelWidth) {
  Config c = llama_gqa();
  c.head_dim = 16;  // H*D = 64 != E = 32
  const Gguf g = parse(save_gguf(c, init_weights(c, 1)));
  EXPECT_EQ(u32(g, "llama.attention.key_length"), 16u);
  EXPECT_EQ(u32(g, "llama.attention.value_length"), 16u);
  EXPECT_EQ(g.tensors.at("blk.0.attn_q.weight").dims, (std::vector<uint64_t>{32, 64}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_output.weight").dims, (std::vector<uint64_t>{64, 32}));
}

TEST(Gguf, Gpt2Hyperparameters) {
  const Config c = gpt2_gqa(false);
  const Gguf g = parse(save_gguf(c, init_weights(c, 1)));
  EXPECT_EQ(str(g, "general.architecture"), "gpt2");
  EXPECT_EQ(u32(g, "gpt2.context_length"), static_cast<uint32_t>(c.max_pos));
  EXPECT_EQ(u32(g, "gpt2.embedding_length"), static_cast<uint32_t>(c.d_model));
  EXPECT_EQ(u32(g, "gpt2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f32(g, "gpt2.attention.layer_norm_epsilon"), static_cast<float>(c.norm_eps));
  EXPECT_FALSE(g.kv.contains("gpt2.rope.freq_base"));
}

TEST(Gguf, ByteLevelTokenizer) {
  const Config c = llama_gqa();
  const Gguf g = parse(save_gguf(c, init_weights(c, 1)));
  EXPECT_EQ(str(g, "tokenizer.ggml.model"), "gpt2");
  EXPECT_TRUE(std::get<Strings>(g.kv.at("tokenizer.ggml.merges")).empty());
  EXPECT_FALSE(std::get<bool>(g.kv.at("tokenizer.ggml.add_bos_token")));
  const Strings& tokens = std::get<Strings>(g.kv.at("tokenizer.ggml.tokens"));
  const Ints& types = std::get<Ints>(g.kv.at("tokenizer.ggml.token_type"));
  ASSERT_EQ(tokens.size(), 256u);
  ASSERT_EQ(types.size(), 256u);
  // GPT-2's byte symbols: printable bytes are themselves, byte 0 is U+0100,
  // '\n' (the 11th non-printable byte) U+010A, ' ' U+0120, 0xAD U+0143.
  EXPECT_EQ(tokens[0], "\xC4\x80");
  EXPECT_EQ(tokens['\n'], "\xC4\x8A");
  EXPECT_EQ(tokens[' '], "\xC4\xA0");
  EXPECT_EQ(tokens['!'], "!");
  EXPECT_EQ(tokens['~'], "~");
  EXPECT_EQ(tokens[0xAD], "\xC5\x83");
  EXPECT_EQ(tokens[0xFF], "\xC3\xBF");  // U+00FF
  // llama.cpp aborts on two tokens with the same text.
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), 256u);
  for (int32_t type : types) EXPECT_EQ(type, 1);  // normal
}

TEST(Gguf, VocabularyFollowsTheConfig) {
  Config c = llama_gqa();
  c.vocab = 300;
  Gguf g = parse(save_gguf(c, init_weights(c, 1)));
  Strings tokens = std::get<Strings>(g.kv.at("tokenizer.ggml.tokens"));
  Ints types = std::get<Ints>(g.kv.at("tokenizer.ggml.token_type"));
  ASSERT_EQ(tokens.size(), 300u);
  EXPECT_EQ(tokens[255], gguf_token_text(255));
  EXPECT_EQ(tokens[256], "<|kvcheck_256|>");
  EXPECT_EQ(tokens[299], "<|kvcheck_299|>");
  EXPECT_EQ(types[255], 1);
  EXPECT_EQ(types[256], 3);  // control
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), 300u);

  c.vocab = 64;
  g = parse(save_gguf(c, init_weights(c, 1)));
  tokens = std::get<Strings>(g.kv.at("tokenizer.ggml.tokens"));
  ASSERT_EQ(tokens.size(), 64u);
  EXPECT_EQ(tokens[33], "!");
  EXPECT_EQ(g.tensors.at("token_embd.weight").dims, (std::vector<uint64_t>{32, 64}));
}

// ---------------------------------------------------------------------------
// Tensors.

TEST(Gguf, LlamaTensorNamesShapesAndValues) {
  const Config c = llama_gqa();
  const Weights w = init_weights(c, 5);
  const Gguf g = parse(save_gguf(c, w));
  const int64_t E = c.d_model, F = c.d_ff, V = c.vocab, Q = c.q_width(), KV = c.kv_width();
  std::map<std::string, std::vector<uint64_t>> want = {
      {"token_embd.weight", {uint64_t(E), uint64_t(V)}},
      {"output_norm.weight", {uint64_t(E)}},
      {"output.weight", {uint64_t(E), uint64_t(V)}},
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    want[p + "attn_norm.weight"] = {uint64_t(E)};
    want[p + "attn_q.weight"] = {uint64_t(E), uint64_t(Q)};
    want[p + "attn_k.weight"] = {uint64_t(E), uint64_t(KV)};
    want[p + "attn_v.weight"] = {uint64_t(E), uint64_t(KV)};
    want[p + "attn_output.weight"] = {uint64_t(Q), uint64_t(E)};
    want[p + "ffn_norm.weight"] = {uint64_t(E)};
    want[p + "ffn_gate.weight"] = {uint64_t(E), uint64_t(F)};
    want[p + "ffn_up.weight"] = {uint64_t(E), uint64_t(F)};
    want[p + "ffn_down.weight"] = {uint64_t(F), uint64_t(E)};
  }
  ASSERT_EQ(g.tensors.size(), want.size());
  for (const auto& [name, dims] : want) {
    ASSERT_TRUE(g.tensors.contains(name)) << name;
    EXPECT_EQ(g.tensors.at(name).dims, dims) << name;
  }
  // Everything but q/k is the canonical [out][in] storage as it is.
  expect_same_bits(g.floats("token_embd.weight"), w.tok_embedding, "token_embd");
  expect_same_bits(g.floats("output.weight"), w.lm_head, "output");
  expect_same_bits(g.floats("output_norm.weight"), w.final_norm, "output_norm");
  const LayerWeights& l1 = w.layers[1];
  expect_same_bits(g.floats("blk.1.attn_norm.weight"), l1.attn_norm, "attn_norm");
  expect_same_bits(g.floats("blk.1.attn_v.weight"), l1.wv, "attn_v");
  expect_same_bits(g.floats("blk.1.attn_output.weight"), l1.wo, "attn_output");
  expect_same_bits(g.floats("blk.1.ffn_norm.weight"), l1.mlp_norm, "ffn_norm");
  expect_same_bits(g.floats("blk.1.ffn_gate.weight"), l1.w_gate, "ffn_gate");
  expect_same_bits(g.floats("blk.1.ffn_up.weight"), l1.w_up, "ffn_up");
  expect_same_bits(g.floats("blk.1.ffn_down.weight"), l1.w_down, "ffn_down");
}

// Rows of a per-head permuted [heads*D][E] matrix: file row h*D + 2i + j holds
// canonical row h*D + j*D/2 + i (Hugging Face's convert_hf_to_gguf permute).
void expect_rope_permuted(const std::vector<float>& file, const std::vector<float>& canonical,
                          int heads, int D, int E, const std::string& what) {
  ASSERT_EQ(file.size(), canonical.size());
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < D / 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        const int file_row = h * D + 2 * i + j, canonical_row = h * D + j * (D / 2) + i;
        for (int e = 0; e < E; ++e) {
          ASSERT_EQ(file[file_row * E + e], canonical[canonical_row * E + e])
              << what << " head " << h << " pair " << i << " half " << j;
        }
      }
    }
  }
}

TEST(Gguf, QueryAndKeyRowsArePermutedPerHead) {
  const Config c = llama_gqa();
  const Weights w = init_weights(c, 9);
  const Gguf g = parse(save_gguf(c, w));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    expect_rope_permuted(g.floats(p + "attn_q.weight"), lw.wq, c.n_heads, c.head_dim, c.d_model,
                         p + "attn_q");
    expect_rope_permuted(g.floats(p + "attn_k.weight"), lw.wk, c.n_kv_heads, c.head_dim, c.d_model,
                         p + "attn_k");
  }
}

// Why the permutation: rotate-half RoPE of the canonical projection equals
// adjacent-pair (NORM) RoPE of the file's projection, up to the same reordering.
TEST(Gguf, PermutationTurnsRotateHalfIntoAdjacentPairs) {
  const Config c = llama_gqa();
  const Weights w = init_weights(c, 11);
  const Gguf g = parse(save_gguf(c, w));
  const std::vector<float> file_wq = g.floats("blk.0.attn_q.weight");
  const int D = c.head_dim, E = c.d_model, H = c.n_heads, pos = 5;
  std::vector<double> x(E);
  for (int e = 0; e < E; ++e) x[e] = std::sin(0.7 * e + 0.3);
  auto project = [&](const std::vector<float>& W, int row) {
    double s = 0;
    for (int e = 0; e < E; ++e) s += W[row * E + e] * x[e];
    return s;
  };
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < D / 2; ++i) {
      const double angle = pos * std::pow(c.rope_theta, -2.0 * i / D);
      // rotate-half on canonical rows (i, i + D/2)
      const double a = project(w.layers[0].wq, h * D + i);
      const double b = project(w.layers[0].wq, h * D + i + D / 2);
      // adjacent pair on file rows (2i, 2i + 1)
      const double fa = project(file_wq, h * D + 2 * i);
      const double fb = project(file_wq, h * D + 2 * i + 1);
      EXPECT_EQ(a * std::cos(angle) - b * std::sin(angle),
                fa * std::cos(angle) - fb * std::sin(angle));
      EXPECT_EQ(b * std::cos(angle) + a * std::sin(angle),
                fb * std::cos(angle) + fa * std::sin(angle));
    }
  }
}

TEST(Gguf, Gpt2FusesQueryKeyValueRows) {
  const Config c = gpt2_gqa(true);
  const Weights w = init_weights(c, 2);
  const Gguf g = parse(save_gguf(c, w));
  const uint64_t E = c.d_model, Q = c.q_width(), KV = c.kv_width(), F = c.d_ff;
  EXPECT_EQ(g.tensors.at("position_embd.weight").dims,
            (std::vector<uint64_t>{E, uint64_t(c.max_pos)}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_qkv.weight").dims, (std::vector<uint64_t>{E, Q + 2 * KV}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_qkv.bias").dims, (std::vector<uint64_t>{Q + 2 * KV}));
  EXPECT_EQ(g.tensors.at("blk.0.ffn_up.weight").dims, (std::vector<uint64_t>{E, F}));
  EXPECT_EQ(g.tensors.at("blk.0.ffn_down.weight").dims, (std::vector<uint64_t>{F, E}));
  EXPECT_FALSE(g.tensors.contains("blk.0.attn_q.weight"));
  const LayerWeights& l0 = w.layers[0];
  std::vector<float> qkv = l0.wq, bias = l0.bq;  // [Q + 2KV][E], [Q + 2KV]
  qkv.insert(qkv.end(), l0.wk.begin(), l0.wk.end());
  qkv.insert(qkv.end(), l0.wv.begin(), l0.wv.end());
  bias.insert(bias.end(), l0.bk.begin(), l0.bk.end());
  bias.insert(bias.end(), l0.bv.begin(), l0.bv.end());
  expect_same_bits(g.floats("blk.0.attn_qkv.weight"), qkv, "attn_qkv.weight");
  expect_same_bits(g.floats("blk.0.attn_qkv.bias"), bias, "attn_qkv.bias");
  expect_same_bits(g.floats("position_embd.weight"), w.pos_embedding, "position_embd");
  expect_same_bits(g.floats("blk.0.ffn_up.bias"), l0.b_up, "ffn_up.bias");
  expect_same_bits(g.floats("output_norm.bias"), w.final_norm_bias, "output_norm.bias");
}

TEST(Gguf, Gpt2WithoutQkvBiasGetsAZeroBias) {
  const Config c = gpt2_gqa(false);
  const Gguf g = parse(save_gguf(c, init_weights(c, 2)));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string name = "blk." + std::to_string(l) + ".attn_qkv.bias";
    ASSERT_TRUE(g.tensors.contains(name)) << "llama.cpp requires " << name;
    const std::vector<float> bias = g.floats(name);
    EXPECT_EQ(bias.size(), static_cast<size_t>(c.q_width() + 2 * c.kv_width()));
    for (float b : bias) EXPECT_EQ(std::bit_cast<uint32_t>(b), 0u);
  }
}

// ---------------------------------------------------------------------------
// Refusals and files.

TEST(Gguf, RefusesWhatLlamaCppCannotRun) {
  Config c = gpt2_tiny();
  c.head_dim = c.d_model / c.n_heads + 2;  // H*D != E
  ASSERT_TRUE(c.validate().empty());
  EXPECT_NE(gguf_unsupported(c).find("n_heads*head_dim"), std::string::npos);
  EXPECT_THROW(save_gguf(c, init_weights(c, 1)), InputError);
  EXPECT_TRUE(gguf_unsupported(llama_gqa()).empty());
  Config bad = llama_gqa();
  bad.n_kv_heads = 3;
  EXPECT_THROW(save_gguf(bad, Weights{}), InputError);
  Weights short_weights = init_weights(llama_gqa(), 1);
  short_weights.lm_head.pop_back();
  EXPECT_THROW(save_gguf(llama_gqa(), short_weights), InputError);
}

TEST(Gguf, FileIsWrittenWhole) {
  const Config c = llama_gqa();
  const Weights w = init_weights(c, 1);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gguf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  ASSERT_EQ(save_gguf_file(path, c, w), "");
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> read((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(read, save_gguf(c, w));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "no temporary left";
  const std::string error = save_gguf_file((dir / "missing" / "m.gguf").string(), c, w);
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvcheck
