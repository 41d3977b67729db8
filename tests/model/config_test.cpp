#include "model/config.h"

#include <gtest/gtest.h>

namespace kvcheck {
namespace {

TEST(Config, TinyConfigsValidate) {
  EXPECT_EQ(gpt2_tiny().validate(), "");
  EXPECT_EQ(llama_tiny().validate(), "");
}

struct Rejection {
  const char* what;
  void (*mutate)(Config&);
  const char* message;
};

TEST(Config, RejectsEveryInconsistency) {
  const Rejection cases[] = {
      {"zero layers", [](Config& c) { c.n_layers = 0; }, "n_layers: 0 is out of range [1, 256]"},
      {"negative width", [](Config& c) { c.d_model = -3; },
       "d_model: -3 is out of range [1, 65536]"},
      {"zero heads", [](Config& c) { c.n_heads = 0; }, "n_heads: 0 is out of range [1, 1024]"},
      {"kv heads not dividing", [](Config& c) { c.n_heads = 6, c.n_kv_heads = 4; },
       "n_kv_heads: 4 does not divide n_heads 6"},
      {"more kv heads than heads", [](Config& c) { c.n_heads = 2, c.n_kv_heads = 4; },
       "n_kv_heads: 4 does not divide n_heads 2"},
      {"zero vocab", [](Config& c) { c.vocab = 0; }, "vocab: 0 is out of range [1, 1048576]"},
      {"huge max_pos", [](Config& c) { c.max_pos = 1 << 21; },
       "max_pos: 2097152 is out of range [1, 1048576]"},
      {"q width overflow", [](Config& c) { c.n_heads = 1024, c.n_kv_heads = 1, c.head_dim = 4096; },
       "n_heads*head_dim: 4194304 exceeds 65536"},
      {"negative eps", [](Config& c) { c.norm_eps = -1e-5; },
       "norm_eps: -1e-05 must be finite and in (0, 1]"},
      {"window pattern without a window", [](Config& c) { c.sliding_window_pattern = 2; },
       "sliding_window_pattern: 2 needs a sliding_window > 0"},
      {"parameter overflow",
       [](Config& c) { c.n_layers = 256, c.d_model = 65536, c.d_ff = 262144; },
       "parameter count: "},
  };
  for (const Rejection& r : cases) {
    Config c = gpt2_tiny();
    r.mutate(c);
    EXPECT_NE(c.validate().find(r.message), std::string::npos)
        << r.what << ": got \"" << c.validate() << "\"";
  }
}

TEST(Config, LlamaRules) {
  Config c = llama_tiny();
  c.head_dim = 7;
  EXPECT_EQ(c.validate(), "head_dim: 7 must be even under RoPE (llama family)");
  c = llama_tiny();
  c.rope_theta = 0.5;
  EXPECT_EQ(c.validate(), "rope_theta: 0.5 must be finite and > 1");
  c = llama_tiny();
  c.qkv_bias = true;
  EXPECT_EQ(c.validate(), "qkv_bias: true is not part of the llama family (it has no biases)");
  // Odd head_dim is fine without RoPE.
  c = gpt2_tiny();
  c.head_dim = 7;
  EXPECT_EQ(c.validate(), "");
}

TEST(Config, GqaMappingIsRepeatInterleave) {
  Config c = llama_tiny();
  c.n_heads = 8;
  c.n_kv_heads = 2;
  std::vector<int> kv_of_head;
  for (int h = 0; h < c.n_heads; ++h) kv_of_head.push_back(h / c.group());
  EXPECT_EQ(kv_of_head, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(Config, KvBytesMatchTheGqaReadme) {
  // 32 layers, head_dim 128, context 32768, bf16, batch 1 (LLMs-from-scratch ch04/04_gqa).
  EXPECT_EQ(kv_cache_bytes(32, 1, 32768, 32, 128, 2), 17179869184ull);  // 17.18 GB
  EXPECT_EQ(kv_cache_bytes(32, 1, 32768, 8, 128, 2), 4294967296ull);    // 4.29 GB
}

TEST(Config, FamilyNames) {
  EXPECT_EQ(parse_family("gpt2").value(), Family::kGpt2);
  EXPECT_EQ(parse_family("llama").value(), Family::kLlama);
  auto bad = parse_family("mistral");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "family: expected \"gpt2\" or \"llama\", got \"mistral\"");
}

}  // namespace
}  // namespace kvcheck
