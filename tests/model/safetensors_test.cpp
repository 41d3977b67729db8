#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "model/le_bytes.h"
#include "model/rng.h"

namespace kvcheck {
namespace {

using nlohmann::json;

// Small, but every width differs, q width (H*D = 20) differs from E (12), and
// GQA (4 query heads on 2 KV heads) makes the c_attn column blocks unequal.
Config small_gpt2() {
  Config c;
  c.family = Family::kGpt2;
  c.n_layers = 2;
  c.d_model = 12;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 5;
  c.d_ff = 16;
  c.vocab = 11;
  c.max_pos = 13;
  c.qkv_bias = true;
  return c;
}

Config small_llama() {
  Config c;
  c.family = Family::kLlama;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_dim = 6;
  c.d_ff = 20;
  c.vocab = 11;
  c.max_pos = 32;
  c.rope_theta = 123456.789;
  c.norm_eps = 1e-6;
  return c;
}

uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

// Weights::operator== compares floats, which calls -0 equal to +0 and NaN
// unequal to itself; a file format must preserve the bits.
void expect_bitwise_equal(const Config& config, const Weights& expected, const Weights& actual) {
  ASSERT_EQ(check_shapes(config, actual), "");
  const std::vector<TensorView> want = tensor_views(config, expected);
  const std::vector<TensorView> got = tensor_views(config, actual);
  ASSERT_EQ(want.size(), got.size());
  for (size_t t = 0; t < want.size(); ++t) {
    ASSERT_EQ(want[t].data->size(), got[t].data->size()) << want[t].name;
    for (size_t k = 0; k < want[t].data->size(); ++k) {
      ASSERT_EQ(bits((*want[t].data)[k]), bits((*got[t].data)[k]))
          << want[t].name << "[" << k << "]";
    }
  }
}

// --- A tiny safetensors toolkit for the tests, written from the format
// description rather than from the code under test.

struct Blob {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct Unpacked {
  json metadata;
  std::vector<std::pair<std::string, Blob>> tensors;  // file order

  Blob& at(const std::string& name) {
    for (auto& [n, blob] : tensors) {
      if (n == name) return blob;
    }
    throw std::out_of_range(name);
  }
};

std::pair<json, std::vector<uint8_t>> split(const std::vector<uint8_t>& file) {
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | file.at(static_cast<size_t>(k));
  json header = json::parse(file.begin() + 8, file.begin() + 8 + static_cast<int64_t>(n));
  return {header, std::vector<uint8_t>(file.begin() + 8 + static_cast<int64_t>(n), file.end())};
}

std::vector<uint8_t> join(const std::string& header_text, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> file;  // [8 + header + data]
  const uint64_t n = header_text.size();
  for (int shift = 0; shift < 64; shift += 8) file.push_back(static_cast<uint8_t>(n >> shift));
  file.insert(file.end(), header_text.begin(), header_text.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

std::vector<uint8_t> join(const json& header, const std::vector<uint8_t>& data) {
  return join(header.dump(), data);
}

Unpacked unpack(const std::vector<uint8_t>& file) {
  auto [header, data] = split(file);
  Unpacked out;
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = entry;
      continue;
    }
    order.emplace_back(entry["data_offsets"][0].get<uint64_t>(), name);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [begin, name] : order) {
    const json& entry = header[name];
    const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
    out.tensors.push_back(
        {name, Blob{entry["dtype"], entry["shape"].get<std::vector<int64_t>>(),
                    std::vector<uint8_t>(data.begin() + static_cast<int64_t>(begin),
                                         data.begin() + static_cast<int64_t>(end))}});
  }
  return out;
}

std::vector<uint8_t> pack(const Unpacked& unpacked) {
  json header = json::object();
  if (!unpacked.metadata.is_null()) header["__metadata__"] = unpacked.metadata;
  std::vector<uint8_t> data;
  for (const auto& [name, blob] : unpacked.tensors) {
    header[name] = {{"dtype", blob.dtype},
                    {"shape", blob.shape},
                    {"data_offsets", {data.size(), data.size() + blob.bytes.size()}}};
    data.insert(data.end(), blob.bytes.begin(), blob.bytes.end());
  }
  return join(header, data);
}

std::vector<float> f32_values(const Blob& blob) {
  EXPECT_EQ(blob.dtype, "F32");
  std::vector<float> values(blob.bytes.size() / 4);  // [elements]
  for (size_t k = 0; k < values.size(); ++k) {
    uint32_t u = 0;
    for (int b = 3; b >= 0; --b) u = u << 8 | blob.bytes[4 * k + static_cast<size_t>(b)];
    values[k] = std::bit_cast<float>(u);
  }
  return values;
}

Blob u16_blob(const std::string& dtype, std::vector<int64_t> shape,
              const std::vector<uint16_t>& values) {
  Blob blob{dtype, std::move(shape), {}};
  for (uint16_t v : values) {
    blob.bytes.push_back(static_cast<uint8_t>(v & 0xFF));
    blob.bytes.push_back(static_cast<uint8_t>(v >> 8));
  }
  return blob;
}

// --- Round trips.

// The run writer (one copy on a little-endian host) against the byte-at-a-
// time one every file format used before: the same bytes for values whose
// bits are easy to mangle (signed zero, a NaN payload, a subnormal).
TEST(LeBytes, AFloatRunIsWrittenAsEachFloatWouldBe) {
  const std::vector<float> values = {
      0.0f,  -0.0f,  std::bit_cast<float>(0x7fc00123u), std::numeric_limits<float>::denorm_min(),
      -1.5f, 3.0e38f};
  std::vector<uint8_t> one_by_one = {0xAB}, as_run = {0xAB};  // a byte already there stays
  for (float v : values) append_f32le(one_by_one, v);
  append_f32le(as_run, values);
  EXPECT_EQ(as_run, one_by_one);
  append_f32le(as_run, std::span<const float>());
  EXPECT_EQ(as_run.size(), 1 + 4 * values.size());
  EXPECT_EQ(as_run[1 + 4 * 1 + 3], 0x80);  // -0.0's sign bit, last byte little-endian
}

TEST(Safetensors, RoundTripsBothFamiliesBitwise) {
  Config gpt2_no_bias = small_gpt2();
  gpt2_no_bias.qkv_bias = false;
  Config mha = gpt2_tiny();
  for (const Config& config : {small_gpt2(), gpt2_no_bias, mha, small_llama(), llama_tiny()}) {
    SCOPED_TRACE(config_to_json(config).dump());
    Weights weights = init_weights(config, 99);
    // Values a lossy path would change: signed zero, NaN payloads, subnormals.
    weights.tok_embedding[0] = -0.0f;
    weights.tok_embedding[1] = std::bit_cast<float>(0x7FA00001u);
    weights.lm_head[2] = std::numeric_limits<float>::denorm_min();
    weights.layers[0].wk.back() = -std::numeric_limits<float>::infinity();
    const std::vector<uint8_t> file = save_safetensors(config, weights);
    const Result<ModelFile> loaded = load_safetensors(file);
    ASSERT_TRUE(loaded.ok()) << loaded.error();
    EXPECT_EQ(loaded.value().config, config);
    expect_bitwise_equal(config, weights, loaded.value().weights);

    const Result<Weights> with_expected = load_safetensors(file, config);
    ASSERT_TRUE(with_expected.ok()) << with_expected.error();
    expect_bitwise_equal(config, weights, with_expected.value());
  }
}

TEST(Safetensors, FileFramingFollowsTheFormat) {
  const Config config = small_llama();
  const std::vector<uint8_t> file = save_safetensors(config, init_weights(config, 1));
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | file[static_cast<size_t>(k)];
  EXPECT_EQ(n % 8, 0u) << "data section should start 8-byte aligned";
  auto [header, data] = split(file);
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["__metadata__"]["kvcheck.config"], config_to_json(config).dump());
  EXPECT_EQ(data.size(), config.parameter_count() * 4);
  // The writer lays tensors out back to back from offset 0.
  EXPECT_EQ(header["model.embed_tokens.weight"]["data_offsets"], json::array({0, 11 * 16 * 4}));
  EXPECT_EQ(header["model.embed_tokens.weight"]["dtype"], "F32");
}

// The header is written without the JSON library's DOM; it must still be
// exactly what the library writes (its compact form, keys sorted): the
// library's dump of the parsed header gives back the same text.
TEST(Safetensors, HeaderIsTheJsonLibrarysCompactSortedForm) {
  for (const Config& config : {small_llama(), small_gpt2()}) {
    const std::vector<uint8_t> file = save_safetensors(config, init_weights(config, 1));
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = n << 8 | file[static_cast<size_t>(k)];
    std::string text(file.begin() + 8, file.begin() + 8 + std::ptrdiff_t(n));
    text.erase(text.find_last_not_of(' ') + 1);  // the alignment padding
    EXPECT_EQ(json::parse(text).dump(), text) << family_name(config.family);
  }
}

TEST(Safetensors, ExpectedConfigMustMatch) {
  const Config config = small_llama();
  const std::vector<uint8_t> file = save_safetensors(config, init_weights(config, 1));
  Config other = config;
  other.n_heads = 8;
  Result<Weights> loaded = load_safetensors(file, other);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error(), "config mismatch: the file has n_heads 4, expected 8");
  other = config;
  other.rope_theta = 10000.0;
  loaded = load_safetensors(file, other);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error(),
            "config mismatch: the file has rope_theta 123456.789, expected 10000.0");
}

TEST(Safetensors, SaveRejectsWeightsThatDoNotFitTheConfig) {
  const Config config = small_gpt2();
  Weights weights = init_weights(config, 1);
  weights.layers[1].bk.pop_back();
  try {
    save_safetensors(config, weights);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "save_safetensors: layers.1.bk: holds 9 values, shape needs 10");
  }
}

// --- Hugging Face names and layouts.

std::set<std::string> tensor_names(const std::vector<uint8_t>& file) {
  std::set<std::string> names;
  for (const auto& [name, blob] : unpack(file).tensors) names.insert(name);
  return names;
}

TEST(Safetensors, LlamaNamesAreLlamaForCausalLM) {
  Config config = small_llama();
  config.n_layers = 1;
  const std::set<std::string> expected = {
      "model.embed_tokens.weight",
      "model.layers.0.input_layernorm.weight",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight",
      "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.post_attention_layernorm.weight",
      "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight",
      "model.layers.0.mlp.down_proj.weight",
      "model.norm.weight",
      "lm_head.weight",
  };
  EXPECT_EQ(tensor_names(save_safetensors(config, init_weights(config, 1))), expected);
}

TEST(Safetensors, Gpt2NamesAreGpt2LMHeadModel) {
  Config config = small_gpt2();
  config.n_layers = 1;
  std::set<std::string> expected = {
      "transformer.wte.weight",
      "transformer.wpe.weight",
      "transformer.h.0.ln_1.weight",
      "transformer.h.0.ln_1.bias",
      "transformer.h.0.attn.c_attn.weight",
      "transformer.h.0.attn.c_attn.bias",
      "transformer.h.0.attn.c_proj.weight",
      "transformer.h.0.attn.c_proj.bias",
      "transformer.h.0.ln_2.weight",
      "transformer.h.0.ln_2.bias",
      "transformer.h.0.mlp.c_fc.weight",
      "transformer.h.0.mlp.c_fc.bias",
      "transformer.h.0.mlp.c_proj.weight",
      "transformer.h.0.mlp.c_proj.bias",
      "transformer.ln_f.weight",
      "transformer.ln_f.bias",
      "lm_head.weight",
  };
  EXPECT_EQ(tensor_names(save_safetensors(config, init_weights(config, 1))), expected);
  // Without a QKV bias there is no c_attn.bias at all, rather than zeros.
  config.qkv_bias = false;
  expected.erase("transformer.h.0.attn.c_attn.bias");
  EXPECT_EQ(tensor_names(save_safetensors(config, init_weights(config, 1))), expected);
}

TEST(Safetensors, LlamaMatricesKeepTheLinearLayout) {
  const Config config = small_llama();
  const Weights weights = init_weights(config, 5);
  Unpacked file = unpack(save_safetensors(config, weights));
  const int64_t E = 16, Q = 24, KV = 6, F = 20;
  EXPECT_EQ(file.at("model.layers.1.self_attn.q_proj.weight").shape, (std::vector<int64_t>{Q, E}));
  EXPECT_EQ(file.at("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{KV, E}));
  EXPECT_EQ(file.at("model.layers.1.self_attn.o_proj.weight").shape, (std::vector<int64_t>{E, Q}));
  EXPECT_EQ(file.at("model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{E, F}));
  EXPECT_EQ(f32_values(file.at("model.layers.1.self_attn.q_proj.weight")), weights.layers[1].wq);
  EXPECT_EQ(f32_values(file.at("model.layers.1.self_attn.v_proj.weight")), weights.layers[1].wv);
  EXPECT_EQ(f32_values(file.at("model.layers.0.mlp.gate_proj.weight")), weights.layers[0].w_gate);
  EXPECT_EQ(f32_values(file.at("model.embed_tokens.weight")), weights.tok_embedding);
  EXPECT_EQ(f32_values(file.at("lm_head.weight")), weights.lm_head);
}

TEST(Safetensors, Gpt2Conv1DIsTransposedAndCAttnFusesQkv) {
  const Config config = small_gpt2();
  const Weights weights = init_weights(config, 5);
  const LayerWeights& layer = weights.layers[1];
  Unpacked file = unpack(save_safetensors(config, weights));
  const int64_t E = 12, Q = 20, KV = 10, F = 16, V = 11;
  const int64_t fused = Q + 2 * KV;  // c_attn columns: q | k | v

  const Blob& c_attn = file.at("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(c_attn.shape, (std::vector<int64_t>{E, fused}));
  const std::vector<float> qkv = f32_values(c_attn);  // [E][Q + 2 KV]
  // Canonical wq[o][i] is c_attn[i][o]; wk's rows start at column H*D, wv's
  // at H*D + KVH*D.
  EXPECT_EQ(qkv[3 * fused + 7], layer.wq[7 * E + 3]);
  EXPECT_EQ(qkv[0 * fused + 0], layer.wq[0]);
  EXPECT_EQ(qkv[11 * fused + 19], layer.wq[19 * E + 11]);
  EXPECT_EQ(qkv[0 * fused + 20], layer.wk[0]);
  EXPECT_EQ(qkv[5 * fused + 20 + 9], layer.wk[9 * E + 5]);
  EXPECT_EQ(qkv[2 * fused + 30], layer.wv[0 * E + 2]);
  EXPECT_EQ(qkv[11 * fused + 39], layer.wv[9 * E + 11]);
  for (int64_t i = 0; i < E; ++i) {
    for (int64_t o = 0; o < KV; ++o) {
      ASSERT_EQ(qkv[i * fused + Q + o], layer.wk[o * E + i]) << i << "," << o;
      ASSERT_EQ(qkv[i * fused + Q + KV + o], layer.wv[o * E + i]) << i << "," << o;
    }
  }

  const Blob& c_attn_bias = file.at("transformer.h.1.attn.c_attn.bias");
  ASSERT_EQ(c_attn_bias.shape, (std::vector<int64_t>{fused}));
  const std::vector<float> qkv_bias = f32_values(c_attn_bias);  // [Q + 2 KV]
  EXPECT_EQ(qkv_bias[4], layer.bq[4]);
  EXPECT_EQ(qkv_bias[20], layer.bk[0]);
  EXPECT_EQ(qkv_bias[39], layer.bv[9]);

  const Blob& c_proj = file.at("transformer.h.1.attn.c_proj.weight");
  ASSERT_EQ(c_proj.shape, (std::vector<int64_t>{Q, E}));  // Conv1D [in][out]
  EXPECT_EQ(f32_values(c_proj)[13 * E + 4], layer.wo[4 * Q + 13]);

  const Blob& c_fc = file.at("transformer.h.1.mlp.c_fc.weight");
  ASSERT_EQ(c_fc.shape, (std::vector<int64_t>{E, F}));
  EXPECT_EQ(f32_values(c_fc)[10 * F + 15], layer.w_up[15 * E + 10]);

  const Blob& mlp_proj = file.at("transformer.h.1.mlp.c_proj.weight");
  ASSERT_EQ(mlp_proj.shape, (std::vector<int64_t>{F, E}));
  EXPECT_EQ(f32_values(mlp_proj)[15 * E + 2], layer.w_down[2 * F + 15]);

  EXPECT_EQ(f32_values(file.at("transformer.h.1.attn.c_proj.bias")), layer.bo);
  EXPECT_EQ(f32_values(file.at("transformer.h.1.mlp.c_fc.bias")), layer.b_up);
  EXPECT_EQ(f32_values(file.at("transformer.h.1.ln_2.bias")), layer.mlp_norm_bias);
  EXPECT_EQ(f32_values(file.at("transformer.wpe.weight")), weights.pos_embedding);
  // The head is an nn.Linear, stored untied and untransposed.
  ASSERT_EQ(file.at("lm_head.weight").shape, (std::vector<int64_t>{V, E}));
  EXPECT_EQ(f32_values(file.at("lm_head.weight")), weights.lm_head);
}

// --- Reduced-precision reads.

TEST(Safetensors, ReadsF16Exactly) {
  const Config config = small_llama();  // E = 16: one value per pattern
  const std::vector<uint16_t> halves = {0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001,
                                        0x8001, 0x03FF, 0x0400, 0x0200, 0x3555, 0x5640,
                                        0x7C00, 0xFC00, 0x7E00, 0x7C01};
  const std::vector<uint32_t> expected = {bits(0.0f),      bits(-0.0f),           bits(1.0f),
                                          bits(-2.0f),     bits(65504.0f),        bits(0x1p-24f),
                                          bits(-0x1p-24f), bits(0x1.ff8p-15f),    bits(0x1p-14f),
                                          bits(0x1p-15f),  bits(0.333251953125f), bits(100.0f),
                                          0x7F800000u,     0xFF800000u,           0x7FC00000u,
                                          0x7F802000u};
  Unpacked file = unpack(save_safetensors(config, init_weights(config, 1)));
  file.at("model.norm.weight") = u16_blob("F16", {16}, halves);
  const Result<ModelFile> loaded = load_safetensors(pack(file));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  for (size_t k = 0; k < halves.size(); ++k) {
    EXPECT_EQ(bits(loaded.value().weights.final_norm[k]), expected[k])
        << "half 0x" << std::hex << halves[k];
  }
}

TEST(Safetensors, ReadsBF16Exactly) {
  const Config config = small_llama();
  const std::vector<uint16_t> bf16 = {0x0000, 0x8000, 0x3F80, 0xC000, 0x0001, 0x807F,
                                      0x0080, 0x7F7F, 0x3EAB, 0x4049, 0xC2F7, 0x4B80,
                                      0x7F80, 0xFF80, 0x7FC0, 0x7F81};
  const std::vector<uint32_t> expected = {
      bits(0.0f),         bits(-0.0f),       bits(1.0f),      bits(-2.0f),
      bits(0x1p-133f),    bits(-0x7Fp-133f), bits(0x1p-126f), bits(0x1.FEp+127f),
      bits(0.333984375f), bits(3.140625f),   bits(-123.5f),   bits(16777216.0f),
      0x7F800000u,        0xFF800000u,       0x7FC00000u,     0x7F810000u};
  Unpacked file = unpack(save_safetensors(config, init_weights(config, 1)));
  file.at("model.norm.weight") = u16_blob("BF16", {16}, bf16);
  const Result<ModelFile> loaded = load_safetensors(pack(file));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  for (size_t k = 0; k < bf16.size(); ++k) {
    EXPECT_EQ(bits(loaded.value().weights.final_norm[k]), expected[k])
        << "bf16 0x" << std::hex << bf16[k];
  }
}

TEST(Safetensors, WholeBF16FileLoadsThroughTheSameLayouts) {
  // Every tensor, Conv1D and fused ones included, stored as the top half of
  // each float: the load must give exactly the truncated weights.
  const Config config = small_gpt2();
  const Weights weights = init_weights(config, 17);
  Unpacked file = unpack(save_safetensors(config, weights));
  for (auto& [name, blob] : file.tensors) {
    std::vector<uint16_t> top;  // [elements]
    for (float x : f32_values(blob)) top.push_back(static_cast<uint16_t>(bits(x) >> 16));
    blob = u16_blob("BF16", blob.shape, top);
  }
  Weights truncated = weights;
  for (const TensorRef& ref : tensor_table(config, truncated)) {
    for (float& x : *ref.data) x = std::bit_cast<float>(bits(x) & 0xFFFF0000u);
  }
  const Result<Weights> loaded = load_safetensors(pack(file), config);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  expect_bitwise_equal(config, truncated, loaded.value());
  EXPECT_NE(loaded.value(), weights);  // the truncation really changed values
}

// --- Malformed files: each is a failure with a message, never a crash.

std::string load_error(const std::vector<uint8_t>& file) {
  const Result<ModelFile> loaded = load_safetensors(file);
  return loaded.ok() ? "(loaded)" : loaded.error();
}

std::vector<uint8_t> small_gpt2_file() {
  Config config = small_gpt2();
  config.n_layers = 1;
  return save_safetensors(config, init_weights(config, 3));
}

// The valid file's header with one change, over the same data section.
std::vector<uint8_t> with_header_change(void (*change)(json&)) {
  auto [header, data] = split(small_gpt2_file());
  change(header);
  return join(header, data);
}

TEST(SafetensorsMalformed, TooShortForTheLength) {
  EXPECT_EQ(load_error({1, 2, 3}), "file is 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(load_error({}), "file is 0 bytes, too short for the 8-byte header length");
}

TEST(SafetensorsMalformed, AbsurdHeaderLength) {
  std::vector<uint8_t> file = small_gpt2_file();
  const uint64_t n = 100'000'001;
  for (int k = 0; k < 8; ++k) file[static_cast<size_t>(k)] = static_cast<uint8_t>(n >> (8 * k));
  EXPECT_EQ(load_error(file), "header length 100000001 exceeds the limit of 100000000 bytes");
  for (int k = 0; k < 8; ++k) file[static_cast<size_t>(k)] = 0xFF;
  EXPECT_EQ(load_error(file),
            "header length 18446744073709551615 exceeds the limit of 100000000 bytes");
}

TEST(SafetensorsMalformed, HeaderLengthPastTheEnd) {
  const std::vector<uint8_t> file = join(std::string("{}"), {});
  std::vector<uint8_t> longer = file;
  longer[0] = 3;  // claims 3 header bytes, 2 follow
  EXPECT_EQ(load_error(longer),
            "header length 3 runs past the end of the file (2 bytes follow the length)");
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  EXPECT_EQ(load_error(join(std::string("{\"a\": "), {})), "header is not valid JSON");
  EXPECT_EQ(load_error(join(std::string(""), {})), "header is not valid JSON");
  std::string bad_utf8 = "{\"\xff\": 1}";
  EXPECT_EQ(load_error(join(bad_utf8, {})), "header is not valid JSON");
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  EXPECT_EQ(load_error(join(std::string("[1, 2]"), {})),
            "header: expected a JSON object, got array");
  EXPECT_EQ(load_error(join(std::string("7"), {})), "header: expected a JSON object, got number");
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  auto [header, data] = split(small_gpt2_file());
  const std::string text = header.dump();
  // A second lm_head.weight entry at the top level.
  const std::string top = text.substr(0, text.size() - 1) +
                          ",\"lm_head.weight\":" + header["lm_head.weight"].dump() + "}";
  EXPECT_EQ(load_error(join(top, data)), "header: duplicate key \"lm_head.weight\"");
  // A repeated field inside one entry.
  std::string inner = text;
  const std::string dtype = "\"dtype\":\"F32\"";
  inner.replace(inner.find(dtype), dtype.size(), dtype + ",\"dtype\":\"F32\"");
  EXPECT_EQ(load_error(join(inner, data)), "header: duplicate key \"dtype\"");
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"] = 5; })),
            "tensor \"lm_head.weight\": expected an object, got 5");
}

TEST(SafetensorsMalformed, EntryFields) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"].erase("dtype"); })),
            "tensor \"lm_head.weight\": missing field \"dtype\"");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["offset"] = 0; })),
            "tensor \"lm_head.weight\": unexpected field \"offset\"");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  // Every dtype of the specification is framed (a checkpoint's integer
  // buffers are skipped by --model), so a wrong size is named first ...
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "F64"; })),
            "tensor \"lm_head.weight\": data_offsets [6176, 6704] hold 528 bytes, but shape [11, "
            "12] of F64 needs 1056");
  // ... and a weight in a dtype kvcheck does not widen is refused by name.
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "I32"; })),
            "tensor \"lm_head.weight\": dtype \"I32\" is not supported (expected \"F32\", \"F16\" "
            "or \"BF16\")");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "f32"; })),
            "tensor \"lm_head.weight\": dtype \"f32\" is not supported (expected \"F32\", \"F16\" "
            "or \"BF16\")");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = 4; })),
            "tensor \"lm_head.weight\": dtype: expected a string, got 4");
}

TEST(SafetensorsMalformed, ShapeNotAListOfNonNegativeIntegers) {
  const char* prefix =
      "tensor \"lm_head.weight\": shape: expected a list of non-negative integers, got ";
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["shape"] = 132; })),
            std::string(prefix) + "132");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({-11, -12});
            })),
            std::string(prefix) + "[-11,-12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({11.0, 12});
            })),
            std::string(prefix) + "[11.0,12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({"11", 12});
            })),
            std::string(prefix) + "[\"11\",12]");
}

TEST(SafetensorsMalformed, ShapeProductOverflow) {
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({4294967296ull, 4294967296ull});
            })),
            "tensor \"lm_head.weight\": shape [4294967296, 4294967296] has too many elements");
  // Fits in 64 bits as a count, but not once multiplied by 4 bytes.
  EXPECT_EQ(load_error(with_header_change(
                [](json& h) { h["lm_head.weight"]["shape"] = json::array({uint64_t{1} << 62}); })),
            "tensor \"lm_head.weight\": shape [4611686018427387904] has too many elements");
}

TEST(SafetensorsMalformed, ShapeDoesNotMatchTheConfig) {
  // Same element count, so only the config check can catch it.
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({12, 11});
            })),
            "tensor \"lm_head.weight\": shape [12, 11] does not match the config's [11, 12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["transformer.h.0.attn.c_attn.weight"]["shape"] = json::array({40, 12});
            })),
            "tensor \"transformer.h.0.attn.c_attn.weight\": shape [40, 12] does not match the "
            "config's [12, 40]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["transformer.ln_f.bias"]["shape"] = json::array({1, 12});
            })),
            "tensor \"transformer.ln_f.bias\": shape [1, 12] does not match the config's [12]");
}

TEST(SafetensorsMalformed, DataOffsets) {
  auto [header, data] = split(small_gpt2_file());
  const uint64_t data_bytes = data.size();
  const uint64_t begin = header["lm_head.weight"]["data_offsets"][0];
  EXPECT_EQ(begin + 11 * 12 * 4, data_bytes);  // the writer puts lm_head last

  header["lm_head.weight"]["data_offsets"] = json::array({begin, data_bytes + 4});
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"lm_head.weight\": data_offsets [" + std::to_string(begin) + ", " +
                std::to_string(data_bytes + 4) + "] run past the end of the data (" +
                std::to_string(data_bytes) + " bytes); is the file truncated?");

  header["lm_head.weight"]["data_offsets"] = json::array({data_bytes, begin});
  EXPECT_EQ(load_error(join(header, data)), "tensor \"lm_head.weight\": data_offsets [" +
                                                std::to_string(data_bytes) + ", " +
                                                std::to_string(begin) + "] are reversed");

  header["lm_head.weight"]["data_offsets"] = json::array({begin + 4, data_bytes});
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"lm_head.weight\": data_offsets [" + std::to_string(begin + 4) + ", " +
                std::to_string(data_bytes) +
                "] hold 524 bytes, but shape [11, 12] of F32 needs 528");

  for (const json& bad :
       {json::array({begin}), json::array({-1, 4}), json(7), json::array({0.0, 4})}) {
    header["lm_head.weight"]["data_offsets"] = bad;
    EXPECT_EQ(load_error(join(header, data)),
              "tensor \"lm_head.weight\": data_offsets: expected [begin, end] as non-negative "
              "integers, got " +
                  bad.dump());
  }
}

TEST(SafetensorsMalformed, SizeDisagreesWithDtype) {
  // Claims BF16 over an F32-sized range.
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "BF16"; })),
            "tensor \"lm_head.weight\": data_offsets [6176, 6704] hold 528 bytes, but shape "
            "[11, 12] of BF16 needs 264");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  auto [header, data] = split(small_gpt2_file());
  const json weight_range = header["transformer.ln_f.weight"]["data_offsets"];
  header["transformer.ln_f.bias"]["data_offsets"] = weight_range;
  const std::string range = "[" + weight_range[0].dump() + ", " + weight_range[1].dump() + ")";
  EXPECT_EQ(load_error(join(header, data)), "tensors \"transformer.ln_f.bias\" " + range +
                                                " and \"transformer.ln_f.weight\" " + range +
                                                " overlap");
}

TEST(SafetensorsMalformed, BytesThatBelongToNoTensor) {
  auto [header, data] = split(small_gpt2_file());
  const size_t size = data.size();
  data.resize(size + 4);
  EXPECT_EQ(load_error(join(header, data)), "data: bytes [" + std::to_string(size) + ", " +
                                                std::to_string(size + 4) + ") belong to no tensor");
}

TEST(SafetensorsMalformed, MissingTensor) {
  Unpacked file = unpack(small_gpt2_file());
  std::erase_if(file.tensors, [](const auto& t) { return t.first == "transformer.ln_f.bias"; });
  EXPECT_EQ(load_error(pack(file)), "missing tensor \"transformer.ln_f.bias\" (shape [12])");
}

TEST(SafetensorsMalformed, UnexpectedTensor) {
  Unpacked file = unpack(small_gpt2_file());
  // HF's causal-mask buffer, as older GPT-2 checkpoints carry it.
  file.tensors.push_back({"transformer.h.0.attn.bias", u16_blob("BF16", {1}, {0})});
  EXPECT_EQ(load_error(pack(file)),
            "unexpected tensor \"transformer.h.0.attn.bias\": not part of a gpt2 model with this "
            "config");
}

TEST(SafetensorsMalformed, QkvBiasPresentButNotConfigured) {
  // A gpt2 file with c_attn.bias whose config says qkv_bias false.
  Config config = small_gpt2();
  config.n_layers = 1;
  Unpacked file = unpack(save_safetensors(config, init_weights(config, 3)));
  config.qkv_bias = false;
  file.metadata["kvcheck.config"] = config_to_json(config).dump();
  EXPECT_EQ(load_error(pack(file)),
            "unexpected tensor \"transformer.h.0.attn.c_attn.bias\": not part of a gpt2 model "
            "with this config");
}

TEST(SafetensorsMalformed, TruncatedFile) {
  std::vector<uint8_t> file = small_gpt2_file();
  file.resize(file.size() - 100);
  const std::string error = load_error(file);
  EXPECT_NE(error.find("tensor \"lm_head.weight\": data_offsets [6176, 6704] run past the end of "
                       "the data (6604 bytes); is the file truncated?"),
            std::string::npos)
      << error;
}

TEST(SafetensorsMalformed, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> file = small_gpt2_file();
  for (size_t size = 0; size < file.size(); ++size) {
    const std::vector<uint8_t> prefix(file.begin(), file.begin() + static_cast<int64_t>(size));
    ASSERT_FALSE(load_safetensors(prefix).ok()) << size;
  }
}

TEST(SafetensorsMalformed, ByteFlipsInTheHeaderNeverCrash) {
  const std::vector<uint8_t> file = small_gpt2_file();
  auto [header, data] = split(file);
  const size_t header_end = file.size() - data.size();
  const uint64_t seed = 7;
  SCOPED_TRACE("seed " + std::to_string(seed));
  SplitMix64 rng(seed);
  int failures = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> mutated = file;
    const size_t at = static_cast<size_t>(rng.below(header_end));
    mutated[at] = static_cast<uint8_t>(rng.below(256));
    const Result<ModelFile> loaded = load_safetensors(mutated);
    if (!loaded.ok()) {
      ++failures;
      EXPECT_FALSE(loaded.error().empty());
    }
  }
  EXPECT_GT(failures, 1000);  // most single-byte changes break something
}

TEST(SafetensorsMalformed, Metadata) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h.erase("__metadata__"); })),
            "__metadata__ has no \"kvcheck.config\": the model config must be stored with the "
            "weights (save_safetensors writes it)");
  EXPECT_EQ(
      load_error(with_header_change([](json& h) { h["__metadata__"].erase("kvcheck.config"); })),
      "__metadata__ has no \"kvcheck.config\": the model config must be stored with the "
      "weights (save_safetensors writes it)");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["__metadata__"] = json::array(); })),
            "__metadata__: expected an object of strings, got []");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["__metadata__"]["format"] = 1; })),
            "__metadata__.\"format\": expected a string, got 1");
  EXPECT_EQ(load_error(with_header_change(
                [](json& h) { h["__metadata__"]["kvcheck.config"] = "{\"family\":"; })),
            "kvcheck.config: not valid JSON");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              json config = json::parse(h["__metadata__"]["kvcheck.config"].get<std::string>());
              config["n_heads"] = "four";
              h["__metadata__"]["kvcheck.config"] = config.dump();
            })),
            "kvcheck.config: config.n_heads: expected an integer, got \"four\"");
}

TEST(SafetensorsMalformed, HugeConfigInASmallFileAllocatesNothing) {
  // A config with 2^34 parameters over a few kilobytes must fail on the first
  // missing or mis-shaped tensor, before any allocation.
  auto [header, data] = split(small_gpt2_file());
  json config = json::parse(header["__metadata__"]["kvcheck.config"].get<std::string>());
  config["vocab"] = 1 << 20;
  config["d_model"] = 4096;
  header["__metadata__"]["kvcheck.config"] = config.dump();
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"transformer.wte.weight\": shape [11, 12] does not match the config's "
            "[1048576, 4096]");
}

// --- Files.

TEST(SafetensorsFile, SavesAtomicallyAndLoads) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvcheck_safetensors_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  const Config config = small_llama();
  const Weights weights = init_weights(config, 21);
  EXPECT_EQ(save_safetensors_file(path, config, weights), "");
  // Overwriting replaces the file and leaves no temporary behind.
  EXPECT_EQ(save_safetensors_file(path, config, weights), "");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  const Result<ModelFile> loaded = load_safetensors_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  EXPECT_EQ(loaded.value().config, config);
  expect_bitwise_equal(config, weights, loaded.value().weights);

  // A broken file names its path.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "abc";
  }
  const Result<ModelFile> broken = load_safetensors_file(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error(), path + ": file is 3 bytes, too short for the 8-byte header length");
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsFile, ErrorsNameThePath) {
  const std::string missing = "/nonexistent-kvcheck-dir/model.safetensors";
  const Result<ModelFile> loaded = load_safetensors_file(missing);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().rfind(missing + ": cannot open", 0), 0u) << loaded.error();
  const std::string directory = std::filesystem::temp_directory_path().string();
  const Result<ModelFile> from_directory = load_safetensors_file(directory);
  ASSERT_FALSE(from_directory.ok());
  EXPECT_EQ(from_directory.error(), directory + ": is a directory");

  const Config config = small_llama();
  const std::string error = save_safetensors_file(missing, config, init_weights(config, 1));
  EXPECT_EQ(error.rfind(missing + ".tmp.", 0), 0u) << error;
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;

  Weights short_weights = init_weights(config, 1);
  short_weights.lm_head.clear();
  EXPECT_EQ(save_safetensors_file(missing, config, short_weights),
            missing + ": save_safetensors: lm_head: holds 0 values, shape needs 176");
}

}  // namespace
}  // namespace kvcheck
