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

// Buffers of one position's pass through a layer, reused across positions.
struct Buffers {
  std::vector<double> h, update;         // [E] one normed position; a block's output
  std::vector<double> gate, up, hidden;  // [F] each: the feed-forward block
  Buffers(int E, int F)
      : h(size_t(E)), update(size_t(E)), gate(size_t(F)), up(size_t(F)), hidden(size_t(F)) {}
};

// The input of one position: its token's embedding row, plus (gpt2) the
// learned embedding of its absolute position. x [E] written.
void embed(const Config& config, const Weights& weights, int32_t token, int position,
           std::span<double> x) {
  const int E = config.d_model;
  const std::span<const float> token_row = row(weights.tok_embedding, token, E);  // [E]
  for (int e = 0; e < E; ++e) x[e] = token_row[e];
  if (config.family == Family::kGpt2) {
    const std::span<const float> position_row = row(weights.pos_embedding, position, E);  // [E]
    for (int e = 0; e < E; ++e) x[e] += position_row[e];
  }
}

// The attention block's input projections of one position, before RoPE.
// x [E] -> q [H*D], k [KVH*D], v [KVH*D]
void project_qkv(const Config& config, const LayerWeights& layer, std::span<const double> x,
                 Buffers& b, std::span<double> q, std::span<double> k, std::span<double> v) {
  const int H = config.n_heads, KVH = config.n_kv_heads, D = config.head_dim;
  norm(config, x, layer.attn_norm, layer.attn_norm_bias, b.h);  // [E]
  linear(b.h, layer.wq, layer.bq, H * D, q);
  linear(b.h, layer.wk, layer.bk, KVH * D, k);
  linear(b.h, layer.wv, layer.bv, KVH * D, v);
}

// The residual add of the attention block's output projection.
// attended [H*D], x [E] updated.
void add_attention_output(const Config& config, const LayerWeights& layer,
                          std::span<const double> attended, Buffers& b, std::span<double> x) {
  linear(attended, layer.wo, layer.bo, config.d_model, b.update);  // [E]
  for (int e = 0; e < config.d_model; ++e) x[e] += b.update[size_t(e)];
}

// The family's feed-forward block on one position, with its norm and
// residual add. x [E] updated.
void add_mlp(const Config& config, const LayerWeights& layer, Buffers& b, std::span<double> x) {
  const int E = config.d_model, F = config.d_ff;
  norm(config, x, layer.mlp_norm, layer.mlp_norm_bias, b.h);  // [E]
  if (config.family == Family::kGpt2) {
    linear(b.h, layer.w_up, layer.b_up, F, b.up);
    for (int i = 0; i < F; ++i) b.hidden[size_t(i)] = gelu_tanh(b.up[size_t(i)]);
  } else {
    linear(b.h, layer.w_gate, {}, F, b.gate);
    linear(b.h, layer.w_up, {}, F, b.up);
    for (int i = 0; i < F; ++i) b.hidden[size_t(i)] = silu(b.gate[size_t(i)]) * b.up[size_t(i)];
  }
  // b_down is empty for llama, so linear adds no bias there.
  linear(b.hidden, layer.w_down, layer.b_down, E, b.update);
  for (int e = 0; e < E; ++e) x[e] += b.update[size_t(e)];
}

// The head of one position. x [E] -> logits [V]
void head(const Config& config, const Weights& weights, std::span<const double> x, Buffers& b,
          std::span<double> logits) {
  norm(config, x, weights.final_norm, weights.final_norm_bias, b.h);  // [E]
  linear(b.h, weights.lm_head, {}, config.vocab, logits);
}

}  // namespace

Output forward(const Config& config, const Weights& weights, std::span<const int32_t> tokens) {
  check_inputs(config, weights, tokens);
  const int T = static_cast<int>(tokens.size());
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, V = config.vocab;

  Output out;
  out.n_tokens = T;
  out.logits.assign(static_cast<size_t>(T) * V, 0.0);       // [T][V]
  out.k.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  out.v.assign(static_cast<size_t>(L) * T * KVH * D, 0.0);  // [L][T][KVH][D]
  if (T == 0) return out;

  // Every buffer is made once here and overwritten by each op that uses it.
  std::vector<double> x(static_cast<size_t>(T) * E);             // [T][E] the residual stream
  std::vector<double> q(static_cast<size_t>(T) * H * D);         // [T][H][D]
  std::vector<double> k(static_cast<size_t>(T) * KVH * D);       // [T][KVH][D]
  std::vector<double> v(static_cast<size_t>(T) * KVH * D);       // [T][KVH][D]
  std::vector<double> attended(static_cast<size_t>(T) * H * D);  // [T][H][D]
  Buffers buffers(E, config.d_ff);

  // Position t sits at absolute position t.
  for (int t = 0; t < T; ++t) embed(config, weights, tokens[t], t, row(x, t, E));

  for (int l = 0; l < L; ++l) {
    const LayerWeights& layer = weights.layers[static_cast<size_t>(l)];
    for (int t = 0; t < T; ++t) {
      project_qkv(config, layer, row(x, t, E), buffers, row(q, t, H * D), row(k, t, KVH * D),
                  row(v, t, KVH * D));
      if (config.family == Family::kLlama) {
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
      add_attention_output(config, layer, row(attended, t, H * D), buffers, row(x, t, E));
      add_mlp(config, layer, buffers, row(x, t, E));
    }
  }

  for (int t = 0; t < T; ++t) head(config, weights, row(x, t, E), buffers, row(out.logits, t, V));
  return out;
}

namespace {

// replay's cells: positions and, per layer, each cell's un-rotated key and
// its value, exactly as computed when the token was fed.
struct Cells {
  std::vector<int32_t> positions;             // [C] in slot order
  std::vector<std::vector<double>> k_raw, v;  // [L][C * KVH * D]
  size_t width = 0;                           // KVH * D, one cell of one layer

  // Keeps the cells whose flag is set, in order.
  void keep(const std::vector<bool>& kept) {
    size_t to = 0;
    for (size_t c = 0; c < kept.size(); ++c) {
      if (!kept[c]) continue;
      positions[to] = positions[c];
      for (size_t l = 0; l < k_raw.size(); ++l) {
        std::copy_n(k_raw[l].begin() + std::ptrdiff_t(c * width), width,
                    k_raw[l].begin() + std::ptrdiff_t(to * width));
        std::copy_n(v[l].begin() + std::ptrdiff_t(c * width), width,
                    v[l].begin() + std::ptrdiff_t(to * width));
      }
      ++to;
    }
    positions.resize(to);
    for (size_t l = 0; l < k_raw.size(); ++l) k_raw[l].resize(to * width), v[l].resize(to * width);
  }

  // Layer l's keys, each rotated to its cell's current position.
  // rotated [C][KVH][D] written.
  void rotated_keys(size_t l, int head_dim, double theta, std::vector<double>& rotated) const {
    rotated = k_raw[l];
    for (size_t c = 0; c < positions.size(); ++c) {
      for (size_t at = c * width; at < (c + 1) * width; at += size_t(head_dim)) {
        apply_rope(std::span<double>(rotated).subspan(at, size_t(head_dim)), positions[c], theta);
      }
    }
  }
};

// A shift's new positions, or the reason it is invalid. Cells that share a
// position (after a div) may keep sharing it; a moved cell may not land on
// a position a cell outside the range holds.
std::string shift_positions(const Config& config, const Event& e, std::vector<int32_t>& positions) {
  if (e.p0 < 0 || e.p1 < e.p0) return "shift needs 0 <= p0 <= p1";
  std::vector<int32_t> moved = positions, staying;
  for (int32_t& p : moved) {
    if (p < e.p0 || p >= e.p1) {
      staying.push_back(p);
      continue;
    }
    const long long to = (long long)p + e.delta;
    if (to < 0 || to >= config.max_pos) return "a shifted position leaves [0, max_pos)";
    p = int32_t(to);
  }
  for (size_t c = 0; c < moved.size(); ++c) {
    if (moved[c] != positions[c] &&
        std::find(staying.begin(), staying.end(), moved[c]) != staying.end()) {
      return "the shift makes two cells hold one position";
    }
  }
  positions = std::move(moved);
  return "";
}

}  // namespace

CellOutput replay(const Config& config, const Weights& weights, std::span<const Event> events) {
  check_inputs(config, weights, {});
  if (config.family != Family::kLlama) {
    throw InputError("oracle: erase and shift need a RoPE model (llama family)");
  }
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, V = config.vocab;
  Cells cells;
  cells.width = size_t(KVH) * size_t(D);
  cells.k_raw.resize(size_t(L));
  cells.v.resize(size_t(L));
  CellOutput out;
  Buffers buffers(E, config.d_ff);
  std::vector<double> x(static_cast<size_t>(E));                          // [E]
  std::vector<double> q(static_cast<size_t>(H) * D), attended(q.size());  // [H][D]
  std::vector<double> k(cells.width), v(cells.width);                     // [KVH][D]
  std::vector<double> keys;                                               // [C][KVH][D] rotated
  const auto fail = [](size_t i, const std::string& what) {
    throw InputError("oracle: event " + std::to_string(i) + ": " + what);
  };
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const size_t C = cells.positions.size();
    if (e.kind == Event::Kind::kTruncate) {
      if (e.n < 0 || size_t(e.n) > C) fail(i, "truncation past the cells");
      std::vector<bool> kept(C, false);
      std::fill(kept.begin(), kept.begin() + std::ptrdiff_t(C - size_t(e.n)), true);
      cells.keep(kept);
      continue;
    }
    if (e.kind == Event::Kind::kErase) {
      if (e.p0 < 0 || e.p1 < e.p0) fail(i, "erase needs 0 <= p0 <= p1");
      std::vector<bool> kept(C);
      for (size_t c = 0; c < C; ++c) {
        kept[c] = cells.positions[c] < e.p0 || cells.positions[c] >= e.p1;
      }
      cells.keep(kept);
      continue;
    }
    if (e.kind == Event::Kind::kShift) {
      if (const std::string error = shift_positions(config, e, cells.positions); !error.empty()) {
        fail(i, error);
      }
      continue;
    }
    if (e.kind == Event::Kind::kDiv) {
      if (e.p0 < 0 || e.p1 < e.p0 || e.delta < 1) fail(i, "div needs 0 <= p0 <= p1 and d >= 1");
      for (int32_t& p : cells.positions) p = p >= e.p0 && p < e.p1 ? p / e.delta : p;
      continue;
    }
    // A fed token at the largest held position + 1.
    int position = 0;
    for (int32_t p : cells.positions) position = std::max(position, p + 1);
    if (position >= config.max_pos) fail(i, "the next position reaches max_pos");
    if (e.token < 0 || e.token >= V) fail(i, "token out of range");
    embed(config, weights, e.token, position, x);
    cells.positions.push_back(position);
    for (int l = 0; l < L; ++l) {
      const LayerWeights& layer = weights.layers[size_t(l)];
      project_qkv(config, layer, x, buffers, q, k, v);
      cells.k_raw[size_t(l)].insert(cells.k_raw[size_t(l)].end(), k.begin(), k.end());
      cells.v[size_t(l)].insert(cells.v[size_t(l)].end(), v.begin(), v.end());
      for (int hq = 0; hq < H; ++hq) apply_rope(row(q, hq, D), position, config.rope_theta);
      // Every alive cell (this token's included) at its current position.
      cells.rotated_keys(size_t(l), D, config.rope_theta, keys);
      attend(q, keys, cells.v[size_t(l)], H, KVH, D, attended);
      add_attention_output(config, layer, attended, buffers, x);
      add_mlp(config, layer, buffers, x);
    }
    out.logits.resize(out.logits.size() + size_t(V));
    head(config, weights, x, buffers,
         std::span<double>(out.logits).subspan(out.logits.size() - size_t(V), size_t(V)));
  }
  out.positions = cells.positions;
  for (int l = 0; l < L; ++l) {
    cells.rotated_keys(size_t(l), D, config.rope_theta, keys);
    out.k.insert(out.k.end(), keys.begin(), keys.end());
    out.v.insert(out.v.end(), cells.v[size_t(l)].begin(), cells.v[size_t(l)].end());
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
