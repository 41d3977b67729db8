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
std::span<const double> row(const std::vector<double>& matrix, int r, int width) {
  return std::span<const double>(matrix).subspan(static_cast<size_t>(r) * width,
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

// The family's pre-attention, pre-MLP and final norm.
std::vector<double> norm(const Config& config, std::span<const double> x,
                         const std::vector<float>& gain, const std::vector<float>& bias) {
  if (config.family == Family::kGpt2) return layer_norm(x, gain, bias, config.norm_eps);
  return rms_norm(x, gain, config.norm_eps);
}

// The family's feed-forward block on one normed position. h [E] -> [E]
std::vector<double> mlp(const Config& config, const LayerWeights& layer,
                        std::span<const double> h) {
  const int E = config.d_model, F = config.d_ff;
  std::vector<double> hidden(static_cast<size_t>(F));  // [F]
  if (config.family == Family::kGpt2) {
    const std::vector<double> up = linear(h, layer.w_up, layer.b_up, F);  // [F]
    for (int i = 0; i < F; ++i) hidden[i] = gelu_tanh(up[i]);
  } else {
    const std::vector<double> gate = linear(h, layer.w_gate, {}, F);  // [F]
    const std::vector<double> up = linear(h, layer.w_up, {}, F);      // [F]
    for (int i = 0; i < F; ++i) hidden[i] = silu(gate[i]) * up[i];
  }
  // b_down is empty for llama, so linear adds no bias there.
  return linear(hidden, layer.w_down, layer.b_down, E);
}

}  // namespace

Output forward(const Config& config, const Weights& weights, std::span<const int32_t> tokens) {
  check_inputs(config, weights, tokens);
  const int T = static_cast<int>(tokens.size());
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, V = config.vocab;
  const bool gpt2 = config.family == Family::kGpt2;

  Output out;
  out.n_tokens = T;
  out.logits.assign(static_cast<size_t>(T) * V, 0.0);       // [T][V]
  out.k.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  out.v.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  if (T == 0) return out;

  // The residual stream; position t sits at absolute position t.
  std::vector<double> x(static_cast<size_t>(T) * E);  // [T][E]
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

    std::vector<double> q(static_cast<size_t>(T) * H * D);    // [T][H][D]
    std::vector<double> k(static_cast<size_t>(T) * KVH * D);  // [T][KVH][D]
    std::vector<double> v(static_cast<size_t>(T) * KVH * D);  // [T][KVH][D]
    for (int t = 0; t < T; ++t) {
      const std::vector<double> h = norm(config, row(x, t, E), layer.attn_norm,
                                         layer.attn_norm_bias);               // [E]
      const std::vector<double> qt = linear(h, layer.wq, layer.bq, H * D);    // [H*D]
      const std::vector<double> kt = linear(h, layer.wk, layer.bk, KVH * D);  // [KVH*D]
      const std::vector<double> vt = linear(h, layer.wv, layer.bv, KVH * D);  // [KVH*D]
      std::copy(qt.begin(), qt.end(), row(q, t, H * D).begin());
      std::copy(kt.begin(), kt.end(), row(k, t, KVH * D).begin());
      std::copy(vt.begin(), vt.end(), row(v, t, KVH * D).begin());
      if (!gpt2) {
        // RoPE before K is stored: the cache holds rotated keys.
        for (int hq = 0; hq < H; ++hq) apply_rope(row(q, t * H + hq, D), t, config.rope_theta);
        for (int hk = 0; hk < KVH; ++hk) apply_rope(row(k, t * KVH + hk, D), t, config.rope_theta);
      }
    }
    const size_t layer_offset = static_cast<size_t>(l) * T * KVH * D;
    std::copy(k.begin(), k.end(), out.k.begin() + static_cast<std::ptrdiff_t>(layer_offset));
    std::copy(v.begin(), v.end(), out.v.begin() + static_cast<std::ptrdiff_t>(layer_offset));

    const std::vector<double> attended = causal_attention(q, k, v, T, H, KVH, D);  // [T][H][D]
    for (int t = 0; t < T; ++t) {
      const std::vector<double> projected =
          linear(row(attended, t, H * D), layer.wo, layer.bo, E);  // [E]
      std::span<double> xt = row(x, t, E);                         // [E]
      for (int e = 0; e < E; ++e) xt[e] += projected[e];
    }

    for (int t = 0; t < T; ++t) {
      std::span<double> xt = row(x, t, E);                                                  // [E]
      const std::vector<double> h = norm(config, xt, layer.mlp_norm, layer.mlp_norm_bias);  // [E]
      const std::vector<double> update = mlp(config, layer, h);                             // [E]
      for (int e = 0; e < E; ++e) xt[e] += update[e];
    }
  }

  for (int t = 0; t < T; ++t) {
    const std::vector<double> h =
        norm(config, row(x, t, E), weights.final_norm, weights.final_norm_bias);  // [E]
    const std::vector<double> logits = linear(h, weights.lm_head, {}, V);         // [V]
    std::copy(logits.begin(), logits.end(), row(out.logits, t, V).begin());
  }
  return out;
}

}  // namespace kvcheck::oracle
