// The oracle's forward pass: shapes, errors, causality, the cache layout of
// K and V, and the KV-head mapping end to end.
#include "oracle/oracle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "model/status.h"
#include "oracle/ops.h"

namespace kvcheck::oracle {
namespace {

Config gpt2_gqa() {
  Config c = gpt2_tiny();  // qkv_bias on
  c.n_heads = 4;
  c.n_kv_heads = 2;
  return c;
}

Config llama_gqa() {
  Config c = llama_tiny();
  c.n_heads = 4;
  c.n_kv_heads = 2;
  return c;
}

std::vector<int32_t> some_tokens(int n, int vocab, int salt) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 37 + salt * 11 + 5) % vocab);
  return tokens;
}

std::string error_of(const Config& c, const std::vector<int32_t>& tokens) {
  try {
    forward(c, init_weights(c, 1), tokens);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Oracle, ShapesOfEveryOutput) {
  for (const Config& c : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(c.family));
    const std::vector<int32_t> tokens = some_tokens(5, c.vocab, 0);
    const Output out = forward(c, init_weights(c, 3), tokens);
    EXPECT_EQ(out.n_tokens, 5);
    EXPECT_EQ(out.logits.size(), size_t{5} * c.vocab);
    EXPECT_EQ(out.k.size(), size_t(c.n_layers) * 5 * c.n_kv_heads * c.head_dim);
    EXPECT_EQ(out.v.size(), out.k.size());
    for (double x : out.logits) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(Oracle, NoTokensGiveEmptyOutput) {
  for (const Config& c : {gpt2_gqa(), llama_gqa()}) {
    const Output out = forward(c, init_weights(c, 3), {});
    EXPECT_EQ(out.n_tokens, 0);
    EXPECT_TRUE(out.logits.empty());
    EXPECT_TRUE(out.k.empty());
    EXPECT_TRUE(out.v.empty());
  }
}

TEST(Oracle, RejectsTokensOutsideVocabNamingIndexAndValue) {
  const Config c = llama_gqa();  // vocab 64
  EXPECT_EQ(error_of(c, {1, 2, -1, 3}), "oracle: token 2: value -1 is out of range [0, 64)");
  EXPECT_EQ(error_of(c, {64}), "oracle: token 0: value 64 is out of range [0, 64)");
  EXPECT_EQ(error_of(c, {0, 63}), "no error");
}

TEST(Oracle, RejectsMorePositionsThanMaxPos) {
  Config c = gpt2_gqa();
  c.max_pos = 4;
  EXPECT_EQ(error_of(c, {1, 2, 3, 4, 5}), "oracle: 5 tokens exceed max_pos 4");
  EXPECT_EQ(error_of(c, {1, 2, 3, 4}), "no error");
}

TEST(Oracle, RejectsWeightsOfAnotherConfig) {
  const Config c = llama_gqa();
  Config other = c;
  other.d_ff = 32;
  const std::vector<int32_t> tokens = {1};
  EXPECT_THROW(forward(c, init_weights(other, 1), tokens), InputError);
}

TEST(Oracle, LogitsAtPositionIgnoreLaterTokens) {
  for (const Config& c : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(c.family));
    const Weights w = init_weights(c, 11);
    const int T = 10, changed_from = 6, V = c.vocab;
    const std::vector<int32_t> a = some_tokens(T, V, 1);
    std::vector<int32_t> b = a;
    for (int t = changed_from; t < T; ++t) b[t] = (a[t] + 1 + t) % V;
    const Output out_a = forward(c, w, a);
    const Output out_b = forward(c, w, b);
    for (int t = 0; t < changed_from; ++t) {
      for (int i = 0; i < V; ++i) ASSERT_EQ(out_a.logit(t, i, V), out_b.logit(t, i, V)) << t;
    }
    // The change is visible where it happens, so the check above can fail.
    EXPECT_NE(out_a.logit(changed_from, 0, V), out_b.logit(changed_from, 0, V));
  }
}

TEST(Oracle, FirstLayerCacheHoldsRotatedKeysAndValuesPerPosition) {
  // Layer 0's K and V depend only on the token embedding at each position, so
  // they can be recomputed here from the ops: this pins the [L][T][KVH][D]
  // layout and that llama keys are stored after RoPE at their own position.
  for (const Config& c : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(c.family));
    const Weights w = init_weights(c, 5);
    const int T = 6, E = c.d_model, KVH = c.n_kv_heads, D = c.head_dim;
    const std::vector<int32_t> tokens = some_tokens(T, c.vocab, 2);
    const Output out = forward(c, w, tokens);
    const bool gpt2 = c.family == Family::kGpt2;
    const LayerWeights& layer = w.layers[0];
    for (int t = 0; t < T; ++t) {
      std::vector<double> x(E);  // [E]
      for (int e = 0; e < E; ++e) {
        x[e] = w.tok_embedding[size_t(tokens[t]) * E + e];
        if (gpt2) x[e] += w.pos_embedding[size_t(t) * E + e];
      }
      const std::vector<double> h =
          gpt2 ? layer_norm(x, layer.attn_norm, layer.attn_norm_bias, c.norm_eps)
               : rms_norm(x, layer.attn_norm, c.norm_eps);                   // [E]
      std::vector<double> k = linear(h, layer.wk, layer.bk, KVH * D);        // [KVH*D]
      const std::vector<double> v = linear(h, layer.wv, layer.bv, KVH * D);  // [KVH*D]
      if (!gpt2) {
        for (int j = 0; j < KVH; ++j) {
          apply_rope(std::span<double>(k).subspan(size_t(j) * D, size_t(D)), t, c.rope_theta);
        }
      }
      for (int i = 0; i < KVH * D; ++i) {
        ASSERT_EQ(out.k[size_t(t) * KVH * D + i], k[i]) << "t " << t << " i " << i;
        ASSERT_EQ(out.v[size_t(t) * KVH * D + i], v[i]) << "t " << t << " i " << i;
      }
    }
  }
}

TEST(Oracle, GroupedHeadsEqualMhaWithKvHeadsRepeatedInterleaved) {
  // A GQA model equals the MHA model whose KV head h is a copy of GQA KV head
  // h / group: the repeat_interleave mapping, end to end. A tiled mapping
  // (h % n_kv_heads) would read other heads and change the logits.
  for (const Config& gqa : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(gqa.family));
    Config mha = gqa;
    mha.n_kv_heads = gqa.n_heads;
    const Weights gqa_weights = init_weights(gqa, 21);
    Weights mha_weights = init_weights(mha, 21);
    const int E = gqa.d_model, D = gqa.head_dim, group = gqa.group();
    for (int l = 0; l < gqa.n_layers; ++l) {
      const LayerWeights& from = gqa_weights.layers[l];
      LayerWeights& to = mha_weights.layers[l];
      to = from;
      to.wk.assign(size_t(mha.kv_width()) * E, 0.0f);  // [H*D][E]
      to.wv.assign(size_t(mha.kv_width()) * E, 0.0f);  // [H*D][E]
      if (gqa.qkv_bias) {
        to.bk.assign(size_t(mha.kv_width()), 0.0f);  // [H*D]
        to.bv.assign(size_t(mha.kv_width()), 0.0f);  // [H*D]
      }
      for (int h = 0; h < mha.n_heads; ++h) {
        const int source = h / group;
        for (int d = 0; d < D; ++d) {
          for (int e = 0; e < E; ++e) {
            to.wk[(size_t(h) * D + d) * E + e] = from.wk[(size_t(source) * D + d) * E + e];
            to.wv[(size_t(h) * D + d) * E + e] = from.wv[(size_t(source) * D + d) * E + e];
          }
          if (gqa.qkv_bias) {
            to.bk[size_t(h) * D + d] = from.bk[size_t(source) * D + d];
            to.bv[size_t(h) * D + d] = from.bv[size_t(source) * D + d];
          }
        }
      }
    }
    const std::vector<int32_t> tokens = some_tokens(7, gqa.vocab, 3);
    const Output a = forward(gqa, gqa_weights, tokens);
    const Output b = forward(mha, mha_weights, tokens);
    EXPECT_EQ(a.logits, b.logits);
  }
}

TEST(Oracle, ResidualPathAloneGivesHeadOfNormedEmbedding) {
  // With attention and MLP outputs zeroed the layers add nothing, so
  // logits = lm_head . final_norm(embedding): checks the residual wiring.
  for (const Config& c : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(c.family));
    Weights w = init_weights(c, 8);
    for (LayerWeights& layer : w.layers) {
      for (auto* m : {&layer.wo, &layer.bo, &layer.w_down, &layer.b_down}) {
        for (float& x : *m) x = 0.0f;
      }
    }
    const int T = 4, E = c.d_model, V = c.vocab;
    const std::vector<int32_t> tokens = some_tokens(T, V, 4);
    const Output out = forward(c, w, tokens);
    for (int t = 0; t < T; ++t) {
      std::vector<double> x(E);  // [E]
      for (int e = 0; e < E; ++e) {
        x[e] = w.tok_embedding[size_t(tokens[t]) * E + e];
        if (c.family == Family::kGpt2) x[e] += w.pos_embedding[size_t(t) * E + e];
      }
      const std::vector<double> h = c.family == Family::kGpt2
                                        ? layer_norm(x, w.final_norm, w.final_norm_bias, c.norm_eps)
                                        : rms_norm(x, w.final_norm, c.norm_eps);  // [E]
      const std::vector<double> logits = linear(h, w.lm_head, {}, V);             // [V]
      for (int i = 0; i < V; ++i) ASSERT_EQ(out.logit(t, i, V), logits[i]) << t << " " << i;
    }
  }
}

TEST(Oracle, OnlyGpt2SeesAbsolutePosition) {
  // The same token three times. gpt2 adds wpe, so the rows differ. llama has
  // no absolute position: every position's V is the same, so attention returns
  // it whatever the rotated scores are, and all rows agree up to rounding. A
  // position leaking anywhere else (RoPE on V, an absolute offset) breaks it.
  const std::vector<int32_t> tokens = {9, 9, 9};
  const Config gpt2 = gpt2_gqa();
  const Output gpt2_out = forward(gpt2, init_weights(gpt2, 2), tokens);
  EXPECT_NE(gpt2_out.logit(0, 0, gpt2.vocab), gpt2_out.logit(2, 0, gpt2.vocab));

  const Config llama = llama_gqa();
  const Output llama_out = forward(llama, init_weights(llama, 2), tokens);
  for (int t = 1; t < 3; ++t) {
    for (int i = 0; i < llama.vocab; ++i) {
      ASSERT_NEAR(llama_out.logit(t, i, llama.vocab), llama_out.logit(0, i, llama.vocab), 1e-12)
          << "position " << t << " logit " << i;
    }
  }
}

// A windowed layer's token at p attends to p - W < q <= p only. With one
// layer nothing else carries earlier tokens forward, so the logits at p must
// not change when a token at or before p - W changes, and must change when
// the token at p - W + 1 (the window's oldest) does.
TEST(Oracle, SlidingWindowMasksTokensOutsideTheWindow) {
  for (Config c : {gpt2_gqa(), llama_gqa()}) {
    SCOPED_TRACE(family_name(c.family));
    c.n_layers = 1;
    const int W = 3, p = 6;
    c.sliding_window = W;
    const Weights weights = init_weights(c, 5);
    const std::vector<int32_t> tokens = some_tokens(p + 1, c.vocab, 2);
    const Output base = forward(c, weights, tokens);
    const auto logits_at_p = [&](const Output& out) {
      return std::vector<double>(out.logits.begin() + size_t(p) * c.vocab,
                                 out.logits.begin() + size_t(p + 1) * c.vocab);
    };
    for (int changed = 0; changed <= p; ++changed) {
      std::vector<int32_t> other = tokens;
      other[size_t(changed)] = (other[size_t(changed)] + 1) % c.vocab;
      const Output out = forward(c, weights, other);
      if (changed <= p - W) {
        EXPECT_EQ(logits_at_p(out), logits_at_p(base)) << "token " << changed;
      } else {
        EXPECT_NE(logits_at_p(out), logits_at_p(base)) << "token " << changed;
      }
    }
    // Without the window the token at p - W is seen.
    c.sliding_window = 0;
    std::vector<int32_t> other = tokens;
    other[size_t(p - W)] = (other[size_t(p - W)] + 1) % c.vocab;
    EXPECT_NE(logits_at_p(forward(c, weights, other)), logits_at_p(forward(c, weights, tokens)));
  }
}

// The pattern picks the windowed layers as Gemma's sliding_window_pattern:
// every N-th layer (l + 1 divisible by N) is global; a window wider than the
// prompt changes nothing.
TEST(Oracle, SlidingWindowPatternAndWideWindows) {
  Config c = llama_gqa();
  c.n_layers = 4;
  c.sliding_window = 2;
  c.sliding_window_pattern = 2;
  EXPECT_TRUE(c.windowed(0));
  EXPECT_FALSE(c.windowed(1));
  EXPECT_TRUE(c.windowed(2));
  EXPECT_FALSE(c.windowed(3));
  c.sliding_window_pattern = 1;
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(c.windowed(l));
  const std::vector<int32_t> tokens = some_tokens(5, c.vocab, 1);
  Config wide = c;
  wide.sliding_window = 5;
  Config none = c;
  none.sliding_window = 0;
  none.sliding_window_pattern = 0;  // a pattern needs a window (Config::validate)
  const Weights weights = init_weights(c, 9);
  EXPECT_EQ(forward(wide, weights, tokens).logits, forward(none, weights, tokens).logits);
  EXPECT_NE(forward(c, weights, tokens).logits, forward(none, weights, tokens).logits);
}

}  // namespace
}  // namespace kvcheck::oracle
