#include "model/weights.h"

#include <cmath>
#include <initializer_list>
#include <span>
#include <string_view>

#include "model/rng.h"

namespace kvcheck {

namespace {

int64_t element_count(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The one list of what a config's model contains. `visit` gets each tensor's
// canonical name, shape, init rule, fan-in and storage, in a fixed order. The
// name and shape are views valid during the call only: a plugin or exec
// backend walks the list for every engine it creates, and building a string
// and a vector per tensor was most of that cost.
template <class W, class Visit>
void walk_tensors(const Config& c, W& w, Visit&& visit) {
  const int64_t E = c.d_model, F = c.d_ff, V = c.vocab, Q = c.q_width(), KV = c.kv_width();
  const int e = c.d_model, q = c.q_width(), f = c.d_ff;
  const bool gpt2 = c.family == Family::kGpt2;
  std::string name;  // prefix + base, reused
  size_t prefix = 0;
  const auto emit = [&](std::string_view base, std::initializer_list<int64_t> shape, InitKind init,
                        int fan_in, auto& data) {
    name.resize(prefix);
    name.append(base);
    visit(std::string_view(name), std::span<const int64_t>(shape.begin(), shape.size()), init,
          fan_in, data);
  };
  emit("tok_embedding", {V, E}, InitKind::kEmbedding, 0, w.tok_embedding);
  if (gpt2) emit("pos_embedding", {c.max_pos, E}, InitKind::kEmbedding, 0, w.pos_embedding);
  for (int l = 0; l < c.n_layers && static_cast<size_t>(l) < w.layers.size(); ++l) {
    auto& lw = w.layers[static_cast<size_t>(l)];
    name = "layers." + std::to_string(l) + ".";
    prefix = name.size();
    emit("attn_norm", {E}, InitKind::kNormGain, 0, lw.attn_norm);
    if (gpt2) emit("attn_norm_bias", {E}, InitKind::kBias, 0, lw.attn_norm_bias);
    emit("wq", {Q, E}, InitKind::kLinear, e, lw.wq);
    emit("wk", {KV, E}, InitKind::kLinear, e, lw.wk);
    emit("wv", {KV, E}, InitKind::kLinear, e, lw.wv);
    if (c.qkv_bias) {
      emit("bq", {Q}, InitKind::kBias, 0, lw.bq);
      emit("bk", {KV}, InitKind::kBias, 0, lw.bk);
      emit("bv", {KV}, InitKind::kBias, 0, lw.bv);
    }
    emit("wo", {E, Q}, InitKind::kLinear, q, lw.wo);
    if (gpt2) emit("bo", {E}, InitKind::kBias, 0, lw.bo);
    emit("mlp_norm", {E}, InitKind::kNormGain, 0, lw.mlp_norm);
    if (gpt2) emit("mlp_norm_bias", {E}, InitKind::kBias, 0, lw.mlp_norm_bias);
    emit("w_up", {F, E}, InitKind::kLinear, e, lw.w_up);
    if (gpt2) emit("b_up", {F}, InitKind::kBias, 0, lw.b_up);
    if (!gpt2) emit("w_gate", {F, E}, InitKind::kLinear, e, lw.w_gate);
    emit("w_down", {E, F}, InitKind::kLinear, f, lw.w_down);
    if (gpt2) emit("b_down", {E}, InitKind::kBias, 0, lw.b_down);
  }
  prefix = 0;
  emit("final_norm", {E}, InitKind::kNormGain, 0, w.final_norm);
  if (gpt2) emit("final_norm_bias", {E}, InitKind::kBias, 0, w.final_norm_bias);
  emit("lm_head", {V, E}, InitKind::kLinear, e, w.lm_head);
}

}  // namespace

std::vector<TensorRef> tensor_table(const Config& c, Weights& w) {
  std::vector<TensorRef> table;
  w.layers.resize(static_cast<size_t>(c.n_layers));
  walk_tensors(
      c, w,
      [&](std::string_view name, std::span<const int64_t> shape, InitKind init, int fan_in,
          std::vector<float>& data) {
        data.resize(static_cast<size_t>(element_count(shape)));
        table.push_back({std::string(name), {shape.begin(), shape.end()}, init, fan_in, &data});
      });
  return table;
}

std::vector<TensorView> tensor_views(const Config& c, const Weights& w) {
  std::vector<TensorView> views;
  walk_tensors(c, w,
               [&](std::string_view name, std::span<const int64_t> shape, InitKind, int,
                   const std::vector<float>& data) {
                 views.push_back({std::string(name), {shape.begin(), shape.end()}, &data});
               });
  return views;
}

void for_each_tensor(const Config& config, const Weights& weights, const TensorVisitor& visit) {
  walk_tensors(config, weights,
               [&](std::string_view name, std::span<const int64_t> shape, InitKind, int,
                   const std::vector<float>& data) { visit(name, shape, data); });
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
               [&](std::string_view name, std::span<const int64_t> shape, InitKind, int,
                   const std::vector<float>& data) {
                 const int64_t want = element_count(shape);
                 if (error.empty() && static_cast<int64_t>(data.size()) != want) {
                   error = std::string(name) + ": holds " + std::to_string(data.size()) +
                           " values, shape needs " + std::to_string(want);
                 }
               });
  return error;
}

}  // namespace kvcheck
