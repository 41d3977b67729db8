// The safetensors reader and writer on well-formed files: bitwise round
// trips of both families, the framing and header the format describes,
// Hugging Face names and layouts, exact f16/bf16 reads, and atomic saves.
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
#include "tests/model/safetensors_toolkit.h"

namespace kvcheck::safetensors_test {
namespace {

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
}  // namespace kvcheck::safetensors_test
