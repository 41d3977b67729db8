#include "model/weights.h"

#include <cmath>

#include "model/rng.h"

namespace kvcheck {

namespace {

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The one list of what a config's model contains. `visit` gets each tensor's
// canonical name, shape, init rule, fan-in and storage, in a fixed order.
template <class W, class Visit>
void walk_tensors(const Config& c, W& w, Visit&& visit) {
  const int64_t E = c.d_model, F = c.d_ff, V = c.vocab, Q = c.q_width(), KV = c.kv_width();
  const int e = c.d_model, q = c.q_width(), f = c.d_ff;
  const bool gpt2 = c.family == Family::kGpt2;
  visit("tok_embedding", std::vector<int64_t>{V, E}, InitKind::kEmbedding, 0, w.tok_embedding);
  if (gpt2) {
    visit("pos_embedding", std::vector<int64_t>{c.max_pos, E}, InitKind::kEmbedding, 0,
          w.pos_embedding);
  }
  for (int l = 0; l < c.n_layers && static_cast<size_t>(l) < w.layers.size(); ++l) {
    auto& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    visit(p + "attn_norm", std::vector<int64_t>{E}, InitKind::kNormGain, 0, lw.attn_norm);
    if (gpt2)
      visit(p + "attn_norm_bias", std::vector<int64_t>{E}, InitKind::kBias, 0, lw.attn_norm_bias);
    visit(p + "wq", std::vector<int64_t>{Q, E}, InitKind::kLinear, e, lw.wq);
    visit(p + "wk", std::vector<int64_t>{KV, E}, InitKind::kLinear, e, lw.wk);
    visit(p + "wv", std::vector<int64_t>{KV, E}, InitKind::kLinear, e, lw.wv);
    if (c.qkv_bias) {
      visit(p + "bq", std::vector<int64_t>{Q}, InitKind::kBias, 0, lw.bq);
      visit(p + "bk", std::vector<int64_t>{KV}, InitKind::kBias, 0, lw.bk);
      visit(p + "bv", std::vector<int64_t>{KV}, InitKind::kBias, 0, lw.bv);
    }
    visit(p + "wo", std::vector<int64_t>{E, Q}, InitKind::kLinear, q, lw.wo);
    if (gpt2) visit(p + "bo", std::vector<int64_t>{E}, InitKind::kBias, 0, lw.bo);
    visit(p + "mlp_norm", std::vector<int64_t>{E}, InitKind::kNormGain, 0, lw.mlp_norm);
    if (gpt2)
      visit(p + "mlp_norm_bias", std::vector<int64_t>{E}, InitKind::kBias, 0, lw.mlp_norm_bias);
    visit(p + "w_up", std::vector<int64_t>{F, E}, InitKind::kLinear, e, lw.w_up);
    if (gpt2) visit(p + "b_up", std::vector<int64_t>{F}, InitKind::kBias, 0, lw.b_up);
    if (!gpt2) visit(p + "w_gate", std::vector<int64_t>{F, E}, InitKind::kLinear, e, lw.w_gate);
    visit(p + "w_down", std::vector<int64_t>{E, F}, InitKind::kLinear, f, lw.w_down);
    if (gpt2) visit(p + "b_down", std::vector<int64_t>{E}, InitKind::kBias, 0, lw.b_down);
  }
  visit("final_norm", std::vector<int64_t>{E}, InitKind::kNormGain, 0, w.final_norm);
  if (gpt2)
    visit("final_norm_bias", std::vector<int64_t>{E}, InitKind::kBias, 0, w.final_norm_bias);
  visit("lm_head", std::vector<int64_t>{V, E}, InitKind::kLinear, e, w.lm_head);
}

}  // namespace

std::vector<TensorRef> tensor_table(const Config& c, Weights& w) {
  std::vector<TensorRef> table;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  walk_tensors(c, w,
               [&](std::string name, std::vector<int64_t> shape, InitKind init, int fan_in,
                   std::vector<float>& data) {
                 data.resize(static_cast<size_t>(element_count(shape)));
                 table.push_back({std::move(name), std::move(shape), init, fan_in, &data});
               });
  return table;
}

std::vector<TensorView> tensor_views(const Config& c, const Weights& w) {
  std::vector<TensorView> views;
  walk_tensors(c, w,
               [&](std::string name, std::vector<int64_t> shape, InitKind, int,
                   const std::vector<float>& data) {
                 views.push_back({std::move(name), std::move(shape), &data});
               });
  return views;
}

Weights init_weights(const Config& config, uint64_t seed) {
  Weights w;
  for (const TensorRef& t : tensor_table(config, w)) {
    SplitMix64 rng(seed ^ fnv1a64(t.name));
    // Uniform(-a, a) has variance a^2/3. Linear layers get variance 1/fan_in
    // so a unit-variance input gives a unit-variance output: attention scores
    // and logits stay O(1) at any width. Embeddings have unit variance so that
    // positions (wpe) weigh as much as tokens and position bugs show.
    double scale = 0.0, offset = 0.0;
    switch (t.init) {
      case InitKind::kEmbedding:
        scale = std::sqrt(3.0);
        break;
      case InitKind::kLinear:
        scale = std::sqrt(3.0 / t.fan_in);
        break;
      case InitKind::kNormGain:
        scale = 0.25, offset = 1.0;
        break;
      case InitKind::kBias:
        scale = 0.1;
        break;
    }
    for (float& x : *t.data) x = static_cast<float>(offset + scale * rng.symmetric_unit());
  }
  return w;
}

std::string check_shapes(const Config& config, const Weights& weights) {
  if (weights.layers.size() != static_cast<size_t>(config.n_layers)) {
    return "layers: " + std::to_string(weights.layers.size()) + " present, config has n_layers " +
           std::to_string(config.n_layers);
  }
  std::string error;
  walk_tensors(config, weights,
               [&](const std::string& name, const std::vector<int64_t>& shape, InitKind, int,
                   const std::vector<float>& data) {
                 const int64_t want = element_count(shape);
                 if (error.empty() && static_cast<int64_t>(data.size()) != want) {
                   error = name + ": holds " + std::to_string(data.size()) +
                           " values, shape needs " + std::to_string(want);
                 }
               });
  return error;
}

}  // namespace kvcheck
