// Hugging Face config.json -> KvShape: the published configs of the presets
// (tests/tools/configs/, the KV-relevant fields as the model repositories
// publish them) and every way a config can be wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model/hf_config.h"
#include "model/kv_presets.h"

namespace kvcheck {
namespace {

using nlohmann::json;

const std::string kConfigs = std::string(KVCHECK_SOURCE_DIR) + "/tests/tools/configs/";

json llama_like() {
  return {{"num_hidden_layers", 32},         {"hidden_size", 4096},
          {"num_attention_heads", 32},       {"num_key_value_heads", 8},
          {"max_position_embeddings", 8192}, {"model_type", "llama"}};
}

std::string error_of(const json& config) {
  const Result<KvShape> r = kv_shape_from_hf_config(config, "config.json");
  return r ? "(parsed)" : r.error();
}

TEST(HfConfig, EveryPresetEqualsItsPublishedConfig) {
  for (const KvShape& preset : kv_presets()) {
    const Result<KvShape> parsed = read_hf_config_file(kConfigs + preset.name + ".json");
    ASSERT_TRUE(parsed) << parsed.error();
    const KvShape& s = parsed.value();
    EXPECT_EQ(s.name, kConfigs + preset.name + ".json");
    EXPECT_EQ(s.n_layers, preset.n_layers) << preset.name;
    EXPECT_EQ(s.hidden, preset.hidden) << preset.name;
    EXPECT_EQ(s.n_heads, preset.n_heads) << preset.name;
    EXPECT_EQ(s.n_kv_heads, preset.n_kv_heads) << preset.name;
    EXPECT_EQ(s.head_dim, preset.head_dim) << preset.name;
    EXPECT_EQ(s.max_context, preset.max_context) << preset.name;
    EXPECT_EQ(s.window, preset.window) << preset.name;
  }
}

TEST(HfConfig, OptionalFieldsFollowTransformers) {
  json c = llama_like();
  c.erase("num_key_value_heads");  // absent: one KV head per query head
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().n_kv_heads, 32);
  c["num_key_value_heads"] = nullptr;
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().n_kv_heads, 32);

  c = llama_like();
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().head_dim, 128);  // hidden / heads
  c["head_dim"] = 256;  // explicit, as Gemma and Qwen3 give it
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().head_dim, 256);

  c = llama_like();
  c["sliding_window"] = nullptr;  // Mistral v0.2 and later
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().window, 0);
  c["sliding_window"] = 4096;
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().window, 4096);
  c["use_sliding_window"] = false;
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().window, 0);
  c["use_sliding_window"] = true;
  EXPECT_EQ(kv_shape_from_hf_config(c, "c").value().window, 4096);

  json gpt2 = {{"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"n_ctx", 128}};  // no n_positions
  EXPECT_EQ(kv_shape_from_hf_config(gpt2, "g").value().max_context, 128);
}

TEST(HfConfig, ErrorsNameTheFieldAndTheValue) {
  json c = llama_like();
  c.erase("hidden_size");
  EXPECT_EQ(error_of(c), "config.json: hidden_size: missing; expected a positive integer");

  c = llama_like();
  c["num_key_value_heads"] = "8";
  EXPECT_EQ(error_of(c),
            "config.json: num_key_value_heads: expected a positive integer, got \"8\"");
  c["num_key_value_heads"] = 0;
  EXPECT_EQ(error_of(c), "config.json: num_key_value_heads: expected a positive integer, got 0");
  c["num_key_value_heads"] = -8;
  EXPECT_EQ(error_of(c), "config.json: num_key_value_heads: expected a positive integer, got -8");
  c["num_key_value_heads"] = 8.5;
  EXPECT_EQ(error_of(c), "config.json: num_key_value_heads: expected a positive integer, got 8.5");
  c["num_key_value_heads"] = 4294967296ull;
  EXPECT_EQ(error_of(c),
            "config.json: num_key_value_heads: expected a positive integer, got 4294967296");
  c["num_key_value_heads"] = 5;
  EXPECT_EQ(error_of(c),
            "config.json: num_key_value_heads: 5 does not divide num_attention_heads 32");

  c = llama_like();
  c["num_attention_heads"] = 24;
  c["num_key_value_heads"] = 8;
  EXPECT_EQ(error_of(c),
            "config.json: num_attention_heads: 24 does not divide hidden_size 4096 and there is "
            "no head_dim");

  c = llama_like();
  c["sliding_window"] = 0;
  EXPECT_EQ(error_of(c), "config.json: sliding_window: expected a positive integer, got 0");
  c["sliding_window"] = 4096;
  c["use_sliding_window"] = "yes";
  EXPECT_EQ(error_of(c), "config.json: use_sliding_window: expected true or false, got \"yes\"");

  EXPECT_EQ(error_of({{"n_layer", 2}, {"n_embd", 64}, {"n_head", 3}, {"n_positions", 8}}),
            "config.json: n_head: 3 does not divide n_embd 64");
  EXPECT_EQ(error_of({{"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}}),
            "config.json: n_positions: missing (and no n_ctx); expected a positive integer");
  EXPECT_EQ(error_of({{"model_type", "bert"}}),
            "config.json: num_hidden_layers: missing (or n_layer for a GPT-2 config); is this a "
            "Hugging Face config.json?");
  EXPECT_EQ(error_of(json::array({1, 2})), "config.json: expected a JSON object, got [1,2]");
}

TEST(HfConfig, UnreadableFiles) {
  const Result<KvShape> missing = read_hf_config_file("/nonexistent/config.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error(), "--config: cannot read \"/nonexistent/config.json\"");

  const std::string path = testing::TempDir() + "kvcheck_bad_config.json";
  std::ofstream(path) << "{\"num_hidden_layers\": 32,";
  const Result<KvShape> bad = read_hf_config_file(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().rfind(path + ": not valid JSON at line 1, column 26: ", 0), 0u) << bad.error();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvcheck
