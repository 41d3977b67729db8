#include "oracle/oracle.h"

#include <algorithm>
#include <cmath>
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

CellOutput replay(const Config& config, const Weights& weights, std::span<const Event> events) {
  check_inputs(config, weights, {});
  if (config.family != Family::kLlama) {
    throw InputError("oracle: erase and shift need a RoPE model (llama family)");
  }
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, F = config.d_ff, V = config.vocab;
  const size_t KV = static_cast<size_t>(KVH) * D;
  // The cells: positions and, per layer, each cell's un-rotated key and its
  // value, exactly as computed when the token was fed.
  std::vector<int32_t> positions;                                  // [C]
  std::vector<std::vector<double>> k_raw(static_cast<size_t>(L));  // [L][C * KVH * D]
  std::vector<std::vector<double>> v_of(static_cast<size_t>(L));   // [L][C * KVH * D]
  CellOutput out;
  std::vector<double> x(static_cast<size_t>(E)), h(x.size()), update(x.size());  // [E]
  std::vector<double> q(static_cast<size_t>(H) * D), attended(q.size());         // [H][D]
  std::vector<double> k(KV), v(KV);                                              // [KVH][D]
  MlpBuffers mlp_buffers{std::vector<double>(size_t(F)), std::vector<double>(size_t(F)),
                         std::vector<double>(size_t(F))};
  const auto fail = [](size_t i, const std::string& what) {
    throw InputError("oracle: event " + std::to_string(i) + ": " + what);
  };
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const size_t C = positions.size();
    if (e.kind == Event::Kind::kTruncate) {
      if (e.n < 0 || size_t(e.n) > C) fail(i, "truncation past the cells");
      positions.resize(C - size_t(e.n));
      for (int l = 0; l < L; ++l) {
        k_raw[size_t(l)].resize(positions.size() * KV);
        v_of[size_t(l)].resize(positions.size() * KV);
      }
      continue;
    }
    if (e.kind == Event::Kind::kErase) {
      if (e.p0 < 0 || e.p1 < e.p0) fail(i, "erase needs 0 <= p0 <= p1");
      size_t kept = 0;
      for (size_t c = 0; c < C; ++c) {
        if (positions[c] >= e.p0 && positions[c] < e.p1) continue;
        positions[kept] = positions[c];
        for (int l = 0; l < L; ++l) {
          std::copy_n(k_raw[size_t(l)].begin() + std::ptrdiff_t(c * KV), KV,
                      k_raw[size_t(l)].begin() + std::ptrdiff_t(kept * KV));
          std::copy_n(v_of[size_t(l)].begin() + std::ptrdiff_t(c * KV), KV,
                      v_of[size_t(l)].begin() + std::ptrdiff_t(kept * KV));
        }
        ++kept;
      }
      positions.resize(kept);
      for (int l = 0; l < L; ++l) {
        k_raw[size_t(l)].resize(kept * KV);
        v_of[size_t(l)].resize(kept * KV);
      }
      continue;
    }
    if (e.kind == Event::Kind::kShift) {
      if (e.p0 < 0 || e.p1 < e.p0) fail(i, "shift needs 0 <= p0 <= p1");
      std::vector<int32_t> moved = positions;
      for (int32_t& p : moved) {
        if (p < e.p0 || p >= e.p1) continue;
        const long long to = (long long)p + e.delta;
        if (to < 0 || to >= config.max_pos) fail(i, "a shifted position leaves [0, max_pos)");
        p = int32_t(to);
      }
      std::vector<int32_t> sorted = moved;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        fail(i, "the shift makes two cells hold one position");
      }
      positions = std::move(moved);
      continue;
    }
    // A fed token at the largest held position + 1.
    int position = 0;
    for (int32_t p : positions) position = std::max(position, p + 1);
    if (position >= config.max_pos) fail(i, "the next position reaches max_pos");
    if (e.token < 0 || e.token >= V) fail(i, "token out of range");
    const std::span<const float> token_row = row(weights.tok_embedding, e.token, E);
    for (int d = 0; d < E; ++d) x[size_t(d)] = token_row[size_t(d)];
    positions.push_back(position);
    const size_t cells = positions.size();
    for (int l = 0; l < L; ++l) {
      const LayerWeights& layer = weights.layers[size_t(l)];
      norm(config, x, layer.attn_norm, layer.attn_norm_bias, h);
      linear(h, layer.wq, layer.bq, H * D, q);
      linear(h, layer.wk, layer.bk, KVH * D, k);
      linear(h, layer.wv, layer.bv, KVH * D, v);
      k_raw[size_t(l)].insert(k_raw[size_t(l)].end(), k.begin(), k.end());
      v_of[size_t(l)].insert(v_of[size_t(l)].end(), v.begin(), v.end());
      for (int hq = 0; hq < H; ++hq) apply_rope(row(q, hq, D), position, config.rope_theta);
      // Every alive cell (this token's included) at its current position.
      std::vector<double> keys(cells * KV);  // [C][KVH][D] rotated
      std::copy(k_raw[size_t(l)].begin(), k_raw[size_t(l)].end(), keys.begin());
      for (size_t c = 0; c < cells; ++c) {
        for (int g = 0; g < KVH; ++g) {
          apply_rope(std::span<double>(keys).subspan(c * KV + size_t(g) * D, size_t(D)),
                     positions[c], config.rope_theta);
        }
      }
      for (int hq = 0; hq < H; ++hq) {
        const int g = kv_head_of(hq, H, KVH);
        std::vector<double> scores(cells);  // [C]
        for (size_t c = 0; c < cells; ++c) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += q[size_t(hq * D + d)] * keys[c * KV + size_t(g * D + d)];
          }
          scores[c] = dot / std::sqrt(double(D));
        }
        const std::vector<double> p = softmax(scores);
        for (int d = 0; d < D; ++d) {
          double sum = 0;
          for (size_t c = 0; c < cells; ++c)
            sum += p[c] * v_of[size_t(l)][c * KV + size_t(g * D + d)];
          attended[size_t(hq * D + d)] = sum;
        }
      }
      linear(attended, layer.wo, layer.bo, E, update);
      for (int d = 0; d < E; ++d) x[size_t(d)] += update[size_t(d)];
      norm(config, x, layer.mlp_norm, layer.mlp_norm_bias, h);
      mlp(config, layer, h, mlp_buffers, update);
      for (int d = 0; d < E; ++d) x[size_t(d)] += update[size_t(d)];
    }
    norm(config, x, weights.final_norm, weights.final_norm_bias, h);
    out.logits.resize(out.logits.size() + size_t(V));
    linear(h, weights.lm_head, {}, V,
           std::span<double>(out.logits).subspan(out.logits.size() - size_t(V), size_t(V)));
  }
  const size_t C = positions.size();
  out.positions = positions;
  out.k.assign(size_t(L) * C * KV, 0.0);
  out.v.assign(out.k.size(), 0.0);
  for (int l = 0; l < L; ++l) {
    for (size_t c = 0; c < C; ++c) {
      for (int g = 0; g < KVH; ++g) {
        const size_t at = (size_t(l) * C + c) * KV + size_t(g) * D;
        std::copy_n(k_raw[size_t(l)].begin() + std::ptrdiff_t(c * KV + size_t(g) * D), D,
                    out.k.begin() + std::ptrdiff_t(at));
        apply_rope(std::span<double>(out.k).subspan(at, size_t(D)), positions[c],
                   config.rope_theta);
      }
    }
    std::copy(v_of[size_t(l)].begin(), v_of[size_t(l)].end(),
              out.v.begin() + std::ptrdiff_t(size_t(l) * C * KV));
  }
  return out;
}

std::vector<double> first_rows(const std::vector<double>& data, int blocks, int rows, int n) {
  if (blocks <= 0 || rows <= 0 || n <= 0) return {};
  const size_t block = data.size() / size_t(blocks), width = block / size_t(rows);
  std::vector<double> out;
  out.reserve(size_t(blocks) * size_t(n) * width);
  for (int b = 0; b < blocks; ++b) {
    const auto begin = data.begin() + std::ptrdiff_t(size_t(b) * block);
    out.insert(out.end(), begin, begin + std::ptrdiff_t(size_t(n) * width));
  }
  return out;
}

Output prefix(const Output& full, int n, int n_layers) {
  Output out;
  out.n_tokens = n;
  out.logits = first_rows(full.logits, 1, full.n_tokens, n);
  out.k = first_rows(full.k, n_layers, full.n_tokens, n);
  out.v = first_rows(full.v, n_layers, full.n_tokens, n);
  return out;
}

}  // namespace kvcheck::oracle
