// Hugging Face checkpoint folders (--model): the loader on files PyTorch
// wrote in Hugging Face's layouts (tools/hf_checkpoint_torch.py, run by the
// ctest fixture into the build folder), checked by the oracle's logits against
// tools/reference_torch.py's, and every refusal by its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/hf_checkpoint.h"
#include "oracle/oracle.h"

namespace kvcheck {
namespace {

using nlohmann::json;

const std::string kDir = KVCHECK_HF_CHECKPOINTS;

// The fixture leaves this marker, and no checkpoints, where PyTorch is
// missing; anything else missing is a failure.
bool torch_missing() {
  return std::ifstream(kDir + "/TORCH_MISSING").good();
}

#define SKIP_WITHOUT_TORCH() \
  if (torch_missing()) GTEST_SKIP() << "PyTorch (python3-torch) is not installed"

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": missing (the hf_checkpoints fixture writes it)");
  return json::parse(in);
}

std::string load_error(const std::string& name) {
  const Result<Checkpoint> loaded = load_hf_checkpoint(kDir + "/" + name);
  return loaded ? "(loaded)" : loaded.error();
}

// The oracle (double) on the loaded weights against torch's float64 forward
// pass on the same stored values: both are exact up to summation order, so
// the bound is a few ulps of the largest logit times the reduction lengths.
void expect_torch_logits(const std::string& name) {
  const Result<Checkpoint> loaded = load_hf_checkpoint(kDir + "/" + name);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const json golden = read_json(kDir + "/" + name + ".logits.json");
  const std::vector<int32_t> tokens = golden.at("tokens").get<std::vector<int32_t>>();
  const oracle::Output out = oracle::forward(loaded.value().config, loaded.value().weights, tokens);
  const int V = loaded.value().config.vocab;
  ASSERT_EQ(golden.at("logits").size(), tokens.size());
  double largest = 0, worst = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<double> row = golden.at("logits").at(t).get<std::vector<double>>();
    ASSERT_EQ(int(row.size()), V);
    for (int v = 0; v < V; ++v) {
      largest = std::max(largest, std::abs(row[size_t(v)]));
      worst = std::max(worst, std::abs(out.logits[t * size_t(V) + size_t(v)] - row[size_t(v)]));
    }
  }
  EXPECT_GT(largest, 1.0) << "logits too small to show a layout error";
  EXPECT_LE(worst, 1e-11 * largest) << name << ": largest |logit| " << largest;
}

TEST(HfCheckpoint, Gpt2WithoutPrefixTiedWithBuffersMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  expect_torch_logits("gpt2");
}

TEST(HfCheckpoint, Gpt2AsSavePretrainedWritesItMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  expect_torch_logits("gpt2_prefixed");
}

TEST(HfCheckpoint, LlamaBf16GqaUntiedMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  expect_torch_logits("llama");
}

TEST(HfCheckpoint, LlamaInTwoShardsMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  expect_torch_logits("llama_sharded");
}

TEST(HfCheckpoint, LlamaF16TiedMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  expect_torch_logits("llama_tied");
}

TEST(HfCheckpoint, ConfigFromConfigJson) {
  SKIP_WITHOUT_TORCH();
  const Result<Checkpoint> gpt2 = load_hf_checkpoint(kDir + "/gpt2");
  ASSERT_TRUE(gpt2.ok()) << gpt2.error();
  const Config& g = gpt2.value().config;
  EXPECT_EQ(g.family, Family::kGpt2);
  EXPECT_EQ(g.n_layers, 2);
  EXPECT_EQ(g.n_kv_heads, 4);
  EXPECT_EQ(g.head_dim, 4);
  EXPECT_EQ(g.d_ff, 64);  // n_inner null: 4 * n_embd
  EXPECT_TRUE(g.qkv_bias);
  EXPECT_EQ(g.max_pos, 32);
  // The tied head is the embedding itself.
  EXPECT_EQ(gpt2.value().weights.lm_head, gpt2.value().weights.tok_embedding);

  const Result<Checkpoint> llama = load_hf_checkpoint(kDir + "/llama");
  ASSERT_TRUE(llama.ok()) << llama.error();
  const Config& l = llama.value().config;
  EXPECT_EQ(l.family, Family::kLlama);
  EXPECT_EQ(l.n_heads, 8);
  EXPECT_EQ(l.n_kv_heads, 2);
  EXPECT_EQ(l.head_dim, 6);
  EXPECT_EQ(l.rope_theta, 500000.0);
  EXPECT_EQ(l.norm_eps, 1e-6);
  EXPECT_NE(llama.value().weights.lm_head, llama.value().weights.tok_embedding);
}

TEST(HfCheckpoint, HashNamesTheFilesContents) {
  SKIP_WITHOUT_TORCH();
  const Result<Checkpoint> a = load_hf_checkpoint(kDir + "/gpt2");
  const Result<Checkpoint> b = load_hf_checkpoint(kDir + "/gpt2_prefixed");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value().hash.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(a.value().hash.size(), 8u + 16u);
  EXPECT_EQ(a.value().hash, load_hf_checkpoint(kDir + "/gpt2").value().hash);
  // The same model under other names is other files.
  EXPECT_NE(a.value().hash, b.value().hash);
}

TEST(HfCheckpoint, RefusedFolders) {
  SKIP_WITHOUT_TORCH();
  const std::pair<const char*, const char*> cases[] = {
      {"bad_unknown_tensor", "unexpected tensor \"h.1.attn.rotary.weight\""},
      {"bad_missing_tensor",
       "missing tensor \"model.layers.1.mlp.up_proj.weight\" (shape [40, 32])"},
      {"bad_shape", "tensor \"wpe.weight\": shape [31, 16] does not match the config's [32, 16]"},
      {"bad_rope_scaling",
       "rope_scaling: {\"factor\":2.0,\"type\":\"linear\"}: kvcheck implements "
       "RoPE without scaling"},
      {"bad_attention_bias", "attention_bias: true:"},
      {"bad_activation", "activation_function: \"gelu\":"},
      {"bad_untied_without_head",
       "missing tensor \"lm_head.weight\": config.json has tie_word_embeddings false"},
      {"bad_tied_head_differs", "tie_word_embeddings is true, but lm_head.weight differs"},
      {"bad_unknown_field", "logit_scale: 0.5: a field kvcheck's llama loader does not know"},
      {"bad_inv_freq", "tensor \"model.layers.0.self_attn.rotary_emb.inv_freq\": element 1 is "},
      {"no_such_folder", "not a folder"},
  };
  for (const auto& [folder, message] : cases) {
    EXPECT_NE(load_error(folder).find(message), std::string::npos)
        << folder << ": " << load_error(folder);
  }
}

// config.json fields one at a time, on a valid Llama and GPT-2 config.
json llama_config() {
  return {{"model_type", "llama"},    {"vocab_size", 60},
          {"hidden_size", 32},        {"intermediate_size", 40},
          {"num_hidden_layers", 2},   {"num_attention_heads", 8},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
          {"rope_scaling", nullptr},  {"tie_word_embeddings", false}};
}

json gpt2_config() {
  return {{"model_type", "gpt2"}, {"vocab_size", 50}, {"n_positions", 32},
          {"n_embd", 16},         {"n_layer", 2},     {"n_head", 4}};
}

std::string config_error(json config, const char* field, json value) {
  config[field] = std::move(value);
  const Result<HfModelConfig> parsed = hf_model_config(config, "config.json");
  return parsed ? "(accepted)" : parsed.error();
}

TEST(HfModelConfig, DefaultsAndAccepted) {
  const Result<HfModelConfig> llama = hf_model_config(llama_config(), "c");
  ASSERT_TRUE(llama.ok()) << llama.error();
  EXPECT_EQ(llama.value().config.head_dim, 4);
  EXPECT_EQ(llama.value().config.rope_theta, 10000.0);
  EXPECT_EQ(llama.value().config.norm_eps, 1e-6);
  EXPECT_FALSE(llama.value().tie_word_embeddings);
  const Result<HfModelConfig> gpt2 = hf_model_config(gpt2_config(), "c");
  ASSERT_TRUE(gpt2.ok()) << gpt2.error();
  EXPECT_TRUE(gpt2.value().tie_word_embeddings);
  EXPECT_EQ(gpt2.value().config.norm_eps, 1e-5);
  // Values that leave the arithmetic alone.
  EXPECT_EQ(config_error(llama_config(), "hidden_act", "silu"), "(accepted)");
  EXPECT_EQ(config_error(llama_config(), "pretraining_tp", 2), "(accepted)");
  EXPECT_EQ(config_error(llama_config(), "attention_dropout", 0.1), "(accepted)");
  EXPECT_EQ(config_error(llama_config(), "partial_rotary_factor", 1.0), "(accepted)");
  EXPECT_EQ(config_error(llama_config(), "sliding_window", nullptr), "(accepted)");
  EXPECT_EQ(config_error(gpt2_config(), "activation_function", "gelu_pytorch_tanh"), "(accepted)");
  EXPECT_EQ(config_error(gpt2_config(), "attn_pdrop", 0.1), "(accepted)");
  json rope = llama_config();
  rope["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const Result<HfModelConfig> v5 = hf_model_config(rope, "c");
  ASSERT_TRUE(v5.ok()) << v5.error();
  EXPECT_EQ(v5.value().config.rope_theta, 1e6);
}

TEST(HfModelConfig, ArithmeticKvcheckDoesNotImplementIsRefusedByName) {
  const json l = llama_config(), g = gpt2_config();
  const std::pair<std::string, std::string> cases[] = {
      {config_error(l, "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}),
       "config.json: rope_scaling: {\"factor\":8.0,\"rope_type\":\"llama3\"}: kvcheck implements "
       "RoPE without scaling"},
      {config_error(l, "attention_bias", true), "config.json: attention_bias: true:"},
      {config_error(l, "mlp_bias", true), "config.json: mlp_bias: true:"},
      {config_error(l, "hidden_act", "gelu"), "config.json: hidden_act: \"gelu\":"},
      {config_error(l, "partial_rotary_factor", 0.5), "config.json: partial_rotary_factor: 0.5:"},
      {config_error(l, "sliding_window", 16), "config.json: sliding_window: 16:"},
      {config_error(l, "quantization_config", {{"quant_method", "gptq"}}),
       "config.json: quantization_config: {\"quant_method\":\"gptq\"}: a field"},
      {config_error(l, "model_type", "mistral"), "config.json: model_type: \"mistral\":"},
      {config_error(l, "rope_parameters", {{"rope_type", "yarn"}}),
       "config.json: rope_parameters: {\"rope_type\":\"yarn\"}: rope_type \"yarn\""},
      {config_error(g, "activation_function", "relu"),
       "config.json: activation_function: \"relu\":"},
      {config_error(g, "scale_attn_by_inverse_layer_idx", true),
       "config.json: scale_attn_by_inverse_layer_idx: true:"},
      {config_error(g, "reorder_and_upcast_attn", true),
       "config.json: reorder_and_upcast_attn: true:"},
      {config_error(g, "scale_attn_weights", false), "config.json: scale_attn_weights: false:"},
      {config_error(g, "add_cross_attention", true), "config.json: add_cross_attention: true:"},
      {config_error(g, "vocab_size", "50"),
       "config.json: vocab_size: expected a positive integer, got \"50\""},
      {config_error(g, "n_head", 3), "config.json: n_head: 3 does not divide n_embd 16"},
  };
  for (const auto& [error, want] : cases) {
    EXPECT_EQ(error.rfind(want, 0), 0u) << "got:  " << error << "\nwant: " << want;
  }
}

}  // namespace
}  // namespace kvcheck
