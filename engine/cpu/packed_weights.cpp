#include "engine/cpu/packed_weights.h"

namespace kvcheck::cpu {

namespace {

// Q, K and V side by side, allocated once: growing by three inserts copied
// the rows up to twice more and freed the old buffers, which was most of
// an engine's creation on small models.
std::vector<float> concat(std::span<const float> a, std::span<const float> b,
                          std::span<const float> c) {
  std::vector<float> out;
  out.reserve(a.size() + b.size() + c.size());
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::vector<float> copy(std::span<const float> src) {
  return {src.begin(), src.end()};
}

uint64_t vec_bytes(const std::vector<float>& v) {
  return v.size() * sizeof(float);
}

}  // namespace

PackedWeights pack_weights(const Config& config, const Weights& w) {
  return pack_weights(
      config, w, [](const std::vector<float>& field) { return std::span<const float>(field); });
}

PackedWeights pack_weights(const Config& config, const Weights& w, const TensorSource& read) {
  PackedWeights p;
  p.tok_embedding = copy(read(w.tok_embedding));
  p.pos_embedding = copy(read(w.pos_embedding));
  p.final_norm = copy(read(w.final_norm));
  p.final_norm_bias = copy(read(w.final_norm_bias));
  p.lm_head = copy(read(w.lm_head));
  for (const LayerWeights& lw : w.layers) {
    PackedLayer& pl = p.layers.emplace_back();
    pl.attn_norm = copy(read(lw.attn_norm));
    pl.attn_norm_bias = copy(read(lw.attn_norm_bias));
    pl.wqkv = concat(read(lw.wq), read(lw.wk), read(lw.wv));
    if (config.qkv_bias) pl.bqkv = concat(read(lw.bq), read(lw.bk), read(lw.bv));
    pl.wo = copy(read(lw.wo));
    pl.bo = copy(read(lw.bo));
    pl.mlp_norm = copy(read(lw.mlp_norm));
    pl.mlp_norm_bias = copy(read(lw.mlp_norm_bias));
    pl.w_up = copy(read(lw.w_up));
    pl.b_up = copy(read(lw.b_up));
    pl.w_gate = copy(read(lw.w_gate));
    pl.w_down = copy(read(lw.w_down));
    pl.b_down = copy(read(lw.b_down));
  }
  return p;
}

uint64_t PackedWeights::bytes() const {
  uint64_t total = vec_bytes(tok_embedding) + vec_bytes(pos_embedding) + vec_bytes(final_norm) +
                   vec_bytes(final_norm_bias) + vec_bytes(lm_head);
  for (const PackedLayer& l : layers) {
    for (const auto* v :
         {&l.attn_norm, &l.attn_norm_bias, &l.wqkv, &l.bqkv, &l.wo, &l.bo, &l.mlp_norm,
          &l.mlp_norm_bias, &l.w_up, &l.b_up, &l.w_gate, &l.w_down, &l.b_down}) {
      total += vec_bytes(*v);
    }
  }
  return total;
}

}  // namespace kvcheck::cpu
