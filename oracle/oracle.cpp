#include "oracle/oracle.h"

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>

#include "model/status.h"
#include "oracle/ops.h"

namespace kvcheck::oracle {

namespace {

// Row r of a row-major matrix of the given width.
std::span<double> row(std::vector<double>& matrix, int r, int width) {
  return std::span<double>(matrix).subspan(static_cast<size_t>(r) * width,
                                           static_cast<size_t>(width));
}
std::span<const float> row(const std::vector<float>& matrix, int r, int width) {
  return std::span<const float>(matrix).subspan(static_cast<size_t>(r) * width,
                                                static_cast<size_t>(width));
}

void check_inputs(const Config& config, const Weights& weights, std::span<const int32_t> tokens) {
  if (const std::string error = config.validate(); !error.empty()) {
    throw InputError("oracle: invalid config: " + error);
  }
  if (const std::string error = check_shapes(config, weights); !error.empty()) {
    throw InputError("oracle: weights do not match the config: " + error);
  }
  if (tokens.size() > static_cast<size_t>(config.max_pos)) {
    std::ostringstream out;
    out << "oracle: " << tokens.size() << " tokens exceed max_pos " << config.max_pos;
    throw InputError(out.str());
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= config.vocab) {
      std::ostringstream out;
      out << "oracle: token " << t << ": value " << tokens[t] << " is out of range [0, "
          << config.vocab << ")";
      throw InputError(out.str());
    }
  }
}

// The family's pre-attention, pre-MLP and final norm. x [E] -> out [E]
void norm(const Config& config, std::span<const double> x, const std::vector<float>& gain,
          const std::vector<float>& bias, std::span<double> out) {
  if (config.family == Family::kGpt2) {
    layer_norm(x, gain, bias, config.norm_eps, out);
  } else {
    rms_norm(x, gain, config.norm_eps, out);
  }
}

// Buffers for the feed-forward block of one position, reused across positions.
struct MlpBuffers {
  std::vector<double> gate, up, hidden;  // [F] each
};

// The family's feed-forward block on one normed position. h [E] -> out [E]
void mlp(const Config& config, const LayerWeights& layer, std::span<const double> h,
         MlpBuffers& buffers, std::span<double> out) {
  const int E = config.d_model, F = config.d_ff;
  std::vector<double>& hidden = buffers.hidden;  // [F]
  std::vector<double>& up = buffers.up;          // [F]
  if (config.family == Family::kGpt2) {
    linear(h, layer.w_up, layer.b_up, F, up);
    for (int i = 0; i < F; ++i) hidden[i] = gelu_tanh(up[i]);
  } else {
    std::vector<double>& gate = buffers.gate;  // [F]
    linear(h, layer.w_gate, {}, F, gate);
    linear(h, layer.w_up, {}, F, up);
    for (int i = 0; i < F; ++i) hidden[i] = silu(gate[i]) * up[i];
  }
  // b_down is empty for llama, so linear adds no bias there.
  linear(hidden, layer.w_down, layer.b_down, E, out);
}

}  // namespace

Output forward(const Config& config, const Weights& weights, std::span<const int32_t> tokens) {
  check_inputs(config, weights, tokens);
  const int T = static_cast<int>(tokens.size());
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, F = config.d_ff, V = config.vocab;
  const bool gpt2 = config.family == Family::kGpt2;

  Output out;
  out.n_tokens = T;
  out.logits.assign(static_cast<size_t>(T) * V, 0.0);       // [T][V]
  out.k.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  out.v.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  if (T == 0) return out;

  // Every buffer is made once here and overwritten by each op that uses it.
  std::vector<double> x(static_cast<size_t>(T) * E);             // [T][E] the residual stream
  std::vector<double> h(static_cast<size_t>(E));                 // [E] one normed position
  std::vector<double> update(static_cast<size_t>(E));            // [E] a block's output
  std::vector<double> q(static_cast<size_t>(T) * H * D);         // [T][H][D]
  std::vector<double> k(static_cast<size_t>(T) * KVH * D);       // [T][KVH][D]
  std::vector<double> v(static_cast<size_t>(T) * KVH * D);       // [T][KVH][D]
  std::vector<double> attended(static_cast<size_t>(T) * H * D);  // [T][H][D]
  MlpBuffers mlp_buffers{std::vector<double>(static_cast<size_t>(F)),
                         std::vector<double>(static_cast<size_t>(F)),
                         std::vector<double>(static_cast<size_t>(F))};

  // Position t sits at absolute position t.
  for (int t = 0; t < T; ++t) {
    const std::span<const float> token_row = row(weights.tok_embedding, tokens[t], E);  // [E]
    std::span<double> xt = row(x, t, E);                                                // [E]
    for (int e = 0; e < E; ++e) xt[e] = token_row[e];
    if (gpt2) {
      const std::span<const float> position_row = row(weights.pos_embedding, t, E);  // [E]
      for (int e = 0; e < E; ++e) xt[e] += position_row[e];
    }
  }

  for (int l = 0; l < L; ++l) {
    const LayerWeights& layer = weights.layers[static_cast<size_t>(l)];

    for (int t = 0; t < T; ++t) {
      norm(config, row(x, t, E), layer.attn_norm, layer.attn_norm_bias, h);  // [E]
      linear(h, layer.wq, layer.bq, H * D, row(q, t, H * D));                // [H*D]
      linear(h, layer.wk, layer.bk, KVH * D, row(k, t, KVH * D));            // [KVH*D]
      linear(h, layer.wv, layer.bv, KVH * D, row(v, t, KVH * D));            // [KVH*D]
      if (!gpt2) {
        // RoPE before K is stored: the cache holds rotated keys.
        for (int hq = 0; hq < H; ++hq) apply_rope(row(q, t * H + hq, D), t, config.rope_theta);
        for (int hk = 0; hk < KVH; ++hk) apply_rope(row(k, t * KVH + hk, D), t, config.rope_theta);
      }
    }
    const size_t layer_offset = static_cast<size_t>(l) * T * KVH * D;
    std::copy(k.begin(), k.end(), out.k.begin() + static_cast<std::ptrdiff_t>(layer_offset));
    std::copy(v.begin(), v.end(), out.v.begin() + static_cast<std::ptrdiff_t>(layer_offset));

    // A windowed layer masks keys at or before t - W (docs/OPERATIONS.md).
    causal_attention(q, k, v, T, H, KVH, D, attended,
                     config.windowed(l) ? config.sliding_window : 0);  // [T][H][D]
    for (int t = 0; t < T; ++t) {
      linear(row(attended, t, H * D), layer.wo, layer.bo, E, update);  // [E]
      std::span<double> xt = row(x, t, E);                             // [E]
      for (int e = 0; e < E; ++e) xt[e] += update[e];
    }

    for (int t = 0; t < T; ++t) {
      std::span<double> xt = row(x, t, E);                       // [E]
      norm(config, xt, layer.mlp_norm, layer.mlp_norm_bias, h);  // [E]
      mlp(config, layer, h, mlp_buffers, update);                // [E]
      for (int e = 0; e < E; ++e) xt[e] += update[e];
    }
  }

  for (int t = 0; t < T; ++t) {
    norm(config, row(x, t, E), weights.final_norm, weights.final_norm_bias, h);  // [E]
    linear(h, weights.lm_head, {}, V, row(out.logits, t, V));                    // [V]
  }
  return out;
}

}  // namespace kvcheck::oracle
