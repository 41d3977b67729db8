#include "engine/cpu/packed_weights.h"

namespace kvcheck::cpu {

namespace {

void append(std::vector<float>& dst, const std::vector<float>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

uint64_t vec_bytes(const std::vector<float>& v) {
  return v.size() * sizeof(float);
}

}  // namespace

PackedWeights pack_weights(const Config& config, const Weights& w) {
  PackedWeights p;
  p.tok_embedding = w.tok_embedding;
  p.pos_embedding = w.pos_embedding;
  p.final_norm = w.final_norm;
  p.final_norm_bias = w.final_norm_bias;
  p.lm_head = w.lm_head;
  for (const LayerWeights& lw : w.layers) {
    PackedLayer& pl = p.layers.emplace_back();
    pl.attn_norm = lw.attn_norm;
    pl.attn_norm_bias = lw.attn_norm_bias;
    append(pl.wqkv, lw.wq);
    append(pl.wqkv, lw.wk);
    append(pl.wqkv, lw.wv);
    if (config.qkv_bias) {
      append(pl.bqkv, lw.bq);
      append(pl.bqkv, lw.bk);
      append(pl.bqkv, lw.bv);
    }
    pl.wo = lw.wo;
    pl.bo = lw.bo;
    pl.mlp_norm = lw.mlp_norm;
    pl.mlp_norm_bias = lw.mlp_norm_bias;
    pl.w_up = lw.w_up;
    pl.b_up = lw.b_up;
    pl.w_gate = lw.w_gate;
    pl.w_down = lw.w_down;
    pl.b_down = lw.b_down;
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
