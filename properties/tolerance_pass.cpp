// The tolerance's one forward pass: a sequence's cells, fed one token at a
// time, with erase, shift and truncation between feeds. derive_error_bounds
// (tokens at 0..T-1) and derive_history_bounds (oracle::replay's events)
// are both this pass, so the two cannot drift apart (tested bit for bit
// where they overlap); each position's arithmetic is the kernels of
// tolerance_kernels.h, whose values are the oracle's ops.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "properties/tolerance.h"
#include "properties/tolerance_kernels.h"

namespace kvcheck {

namespace {

using namespace tolerance;

// One layer's cells as the engine holds them: value and error variance of
// the stored K/V, P6's bound, and q8_0's pre-storage bound (empty otherwise).
struct CellLayer {
  std::vector<double> k, var_k, v, var_v, k_bound, v_bound, k_comp, v_comp;  // [C][KVH][D] each
};

// The arithmetic model of one model's pass: K's blocks in pair order where
// the engine declares it and the model is a llama (its q/k rows permuted).
ArithmeticModel model_of(const Config& config, const ArithmeticTraits& arithmetic,
                         KvDtype kv_dtype) {
  ArithmeticModel m = arithmetic_model(arithmetic, kv_dtype);
  m.k_pair_order = arithmetic.k_blocks_in_pair_order && config.family == Family::kLlama &&
                   config.head_dim % 2 == 0;
  return m;
}

class Pass {
 public:
  Pass(const Config& config, const Weights& weights, KvDtype kv_dtype,
       const ArithmeticTraits& arithmetic, bool windows)
      : c_(config),
        w_(weights),
        m_(model_of(config, arithmetic, kv_dtype)),
        in_float_(arithmetic.rope_angles_in_float),
        windows_(windows),
        KV_(config.kv_width()),
        cells_(sz(config.n_layers)),
        x_(sz(config.d_model)),
        var_x_(x_.size()),
        h_(x_.size()),
        var_h_(x_.size()),
        proj_(x_.size()),
        var_proj_(x_.size()),
        q_(sz(config.q_width())),
        var_q_(q_.size()),
        att_(q_.size()),
        var_att_(q_.size()),
        angles_(config.head_dim),
        error_per_step_(float_angle_error_per_step(config.rope_theta, config.head_dim)),
        mlp_(config.d_model, config.d_ff) {}

  // A token at the largest held position + 1 (0 when empty); its logits'
  // bounds (and values) join logit_bounds (logit_values).
  void feed(int32_t token);
  // Keeps the cells whose flag is set, in slot order (erase, truncation).
  void keep(const std::vector<bool>& kept);
  // The engine reads each cell in [p0, p1)'s stored key, rotates it by delta
  // in float and stores it again.
  void shift(int p0, int p1, int delta);
  // A div: each cell in [p0, p1) whose position / d differs from its
  // position is rotated so, by its own delta (position / d - position).
  void div(int p0, int p1, int d);

  const std::vector<int32_t>& positions() const { return positions_; }
  // Layer-major concatenation of one field of every layer's cells:
  // [L][C][KVH][D].
  std::vector<double> gather(std::vector<double> CellLayer::*field) const;

  std::vector<double> logit_bounds, logit_values;  // [feeds][V]

 private:
  void layer(int l);
  void store_and_append(CellLayer& cells);
  // Cell c's stored key, every layer: rotated at the current angles, stored again.
  void rotate_cell(size_t c);
  // RoPE of one head at the current angles, rounded to narrower activations.
  void rope(double* head, double* var) {
    rope_var(head, var, angles_, c_.head_dim, m_.single);
    if (m_.output.none()) return;
    for (int d = 0; d < c_.head_dim; ++d) var[d] += sq(m_.output.of(head[d]));
  }

  bool k_quantized() const { return m_.storage_k.per_scale > 0; }
  bool v_quantized() const { return m_.storage_v.per_scale > 0; }

  const Config& c_;
  const Weights& w_;
  const ArithmeticModel m_;
  const bool in_float_, windows_;
  const int KV_;
  std::vector<CellLayer> cells_;                   // [L]
  std::vector<int32_t> positions_;                 // [C]
  std::vector<double> x_, var_x_, h_, var_h_;      // [E] the fed position
  std::vector<double> proj_, var_proj_;            // [E] a block's output
  std::vector<double> q_, var_q_, att_, var_att_;  // [H][D]
  std::vector<double> k_, var_k_, v_, var_v_;      // [KVH][D] the fed position's K/V
  std::vector<double> kb_, vb_, kc_, vc_;          // [KVH][D] their P6 bounds
  RopeAngles angles_;                              // [D/2] at the fed position
  const double error_per_step_;
  AttendScratch attend_;
  MlpScratch mlp_;
};

void Pass::feed(int32_t token) {
  const int E = c_.d_model, V = c_.vocab;
  const bool gpt2 = c_.family == Family::kGpt2;
  int position = 0;
  for (int32_t p : positions_) position = std::max(position, p + 1);
  positions_.push_back(position);
  const float* token_row = w_.tok_embedding.data() + sz(token) * sz(E);  // [E]
  for (int e = 0; e < E; ++e) {
    x_[sz(e)] = token_row[e];
    var_x_[sz(e)] = 0;  // a copied embedding row is exact
    double stored = std::abs(x_[sz(e)]);
    if (gpt2) {
      const double wpe = w_.pos_embedding[sz(position) * sz(E) + sz(e)];
      stored += std::abs(wpe);
      x_[sz(e)] += wpe;
      var_x_[sz(e)] = sq(m_.single * x_[sz(e)]);  // one add
    }
    // Rows rounded as weights, the copy rounded to narrower activations.
    var_x_[sz(e)] += sq(m_.weight * stored) + sq(m_.output.of(x_[sz(e)]));
  }
  if (!gpt2) angles_.at(position, c_.rope_theta, in_float_, error_per_step_);
  for (int l = 0; l < c_.n_layers; ++l) layer(l);
  norm_var(gpt2, x_.data(), var_x_.data(), w_.final_norm, w_.final_norm_bias, E, c_.norm_eps,
           h_.data(), var_h_.data(), m_);
  const size_t at = logit_bounds.size();
  logit_bounds.resize(at + sz(V)), logit_values.resize(at + sz(V));
  linear_var(w_.lm_head, {}, h_.data(), var_h_.data(), E, V, logit_values.data() + at,
             logit_bounds.data() + at, m_);
  for (size_t i = at; i < logit_bounds.size(); ++i) {
    logit_bounds[i] = kConfidence * std::sqrt(logit_bounds[i]);
  }
}

// One layer of the fed token: q/k/v, RoPE, storage, attention over the cells
// (the last W for a windowed layer when windows apply), out-proj, MLP.
void Pass::layer(int l) {
  const int E = c_.d_model, H = c_.n_heads, KVH = c_.n_kv_heads, D = c_.head_dim, Q = c_.q_width();
  const bool gpt2 = c_.family == Family::kGpt2;
  const LayerWeights& w = w_.layers[sz(l)];
  k_.resize(sz(KV_)), var_k_.resize(sz(KV_)), v_.resize(sz(KV_)), var_v_.resize(sz(KV_));
  norm_var(gpt2, x_.data(), var_x_.data(), w.attn_norm, w.attn_norm_bias, E, c_.norm_eps, h_.data(),
           var_h_.data(), m_);
  linear_var(w.wq, w.bq, h_.data(), var_h_.data(), E, Q, q_.data(), var_q_.data(), m_);
  linear_var(w.wk, w.bk, h_.data(), var_h_.data(), E, KV_, k_.data(), var_k_.data(), m_);
  linear_var(w.wv, w.bv, h_.data(), var_h_.data(), E, KV_, v_.data(), var_v_.data(), m_);
  if (!gpt2) {
    for (int hq = 0; hq < H; ++hq) rope(&q_[sz(hq * D)], &var_q_[sz(hq * D)]);
    for (int g = 0; g < KVH; ++g) rope(&k_[sz(g * D)], &var_k_[sz(g * D)]);
  }
  // q rounded to the type attention reads K in (ggml's vec_dot).
  if (m_.round_queries) {
    store_var(q_.data(), var_q_.data(), nullptr, nullptr, H, D, m_.query, m_.k_pair_order);
  }
  CellLayer& cells = cells_[sz(l)];
  store_and_append(cells);
  // A windowed layer's query reads the last W cells (docs/OPERATIONS.md).
  const int n_cells = int(positions_.size());
  const int window = windows_ && c_.windowed(l) ? c_.sliding_window : 0;
  const int first = window > 0 ? std::max(0, n_cells - window) : 0;
  const size_t skip = sz(first) * sz(KV_);  // cells before the window
  attend_var(q_.data(), var_q_.data(), cells.k.data() + skip, cells.var_k.data() + skip,
             cells.v.data() + skip, cells.var_v.data() + skip, n_cells - first, H, KVH, D, attend_,
             att_.data(), var_att_.data(), m_);
  linear_var(w.wo, w.bo, att_.data(), var_att_.data(), Q, E, proj_.data(), var_proj_.data(), m_);
  for (int e = 0; e < E; ++e) {
    x_[sz(e)] += proj_[sz(e)];
    var_x_[sz(e)] += var_proj_[sz(e)] + sq(m_.single * x_[sz(e)]);  // the residual add rounds once
  }
  mlp_var(gpt2, w, E, c_.d_ff, c_.norm_eps, x_.data(), var_x_.data(), mlp_, m_);
}

// What P6 compares (store_var: K and V each in its own type), then the fed
// position joins the layer's cells.
void Pass::store_and_append(CellLayer& cells) {
  kb_.resize(sz(KV_)), vb_.resize(sz(KV_));
  kc_.resize(k_quantized() ? sz(KV_) : 0), vc_.resize(v_quantized() ? sz(KV_) : 0);
  store_var(k_.data(), var_k_.data(), kb_.data(), k_quantized() ? kc_.data() : nullptr,
            c_.n_kv_heads, c_.head_dim, m_.storage_k, m_.k_pair_order);
  store_var(v_.data(), var_v_.data(), vb_.data(), v_quantized() ? vc_.data() : nullptr,
            c_.n_kv_heads, c_.head_dim, m_.storage_v);
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  append(cells.k, k_), append(cells.var_k, var_k_), append(cells.v, v_);
  append(cells.var_v, var_v_), append(cells.k_bound, kb_), append(cells.v_bound, vb_);
  append(cells.k_comp, kc_), append(cells.v_comp, vc_);
}

void Pass::keep(const std::vector<bool>& kept) {
  for (CellLayer& c : cells_) {
    for (std::vector<double>* a :
         {&c.k, &c.var_k, &c.v, &c.var_v, &c.k_bound, &c.v_bound, &c.k_comp, &c.v_comp}) {
      if (a->empty()) continue;  // k_comp, v_comp of a type that is not quantized
      size_t to = 0;
      for (size_t i = 0; i < kept.size(); ++i) {
        if (!kept[i]) continue;
        std::copy_n(a->begin() + std::ptrdiff_t(i * sz(KV_)), KV_,
                    a->begin() + std::ptrdiff_t(to * sz(KV_)));
        ++to;
      }
      a->resize(to * sz(KV_));
    }
  }
  size_t to = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i]) positions_[to++] = positions_[i];
  }
  positions_.resize(to);
}

void Pass::rotate_cell(size_t c) {
  const bool quantized = k_quantized();
  const int KVH = c_.n_kv_heads, D = c_.head_dim;
  for (CellLayer& layer : cells_) {
    double* value = layer.k.data() + c * sz(KV_);
    double* var = layer.var_k.data() + c * sz(KV_);
    for (int g = 0; g < KVH; ++g) rope(value + g * D, var + g * D);
    store_var(value, var, layer.k_bound.data() + c * sz(KV_),
              quantized ? layer.k_comp.data() + c * sz(KV_) : nullptr, KVH, D, m_.storage_k,
              m_.k_pair_order);
  }
}

void Pass::shift(int p0, int p1, int delta) {
  // A shift's angles are delta * frequency: an engine with float angles errs
  // in them by the same rule as in a fed key's.
  angles_.at(delta, c_.rope_theta, in_float_, error_per_step_);
  for (size_t c = 0; c < positions_.size(); ++c) {
    if (positions_[c] < p0 || positions_[c] >= p1) continue;
    positions_[c] += delta;
    rotate_cell(c);
  }
}

void Pass::div(int p0, int p1, int d) {
  for (size_t c = 0; c < positions_.size(); ++c) {
    const int from = positions_[c];
    if (from < p0 || from >= p1 || from / d == from) continue;
    positions_[c] = from / d;
    angles_.at(positions_[c] - from, c_.rope_theta, in_float_, error_per_step_);
    rotate_cell(c);
  }
}

std::vector<double> Pass::gather(std::vector<double> CellLayer::*field) const {
  std::vector<double> out;
  for (const CellLayer& c : cells_) out.insert(out.end(), (c.*field).begin(), (c.*field).end());
  return out;
}

}  // namespace

ErrorBounds prefix(const ErrorBounds& full, int n, int n_layers) {
  ErrorBounds out;
  out.n_tokens = n;
  out.quantizer = full.quantizer;
  out.logits = oracle::first_rows(full.logits, 1, full.n_tokens, n);
  out.k = oracle::first_rows(full.k, n_layers, full.n_tokens, n);
  out.v = oracle::first_rows(full.v, n_layers, full.n_tokens, n);
  out.k_computed = oracle::first_rows(full.k_computed, n_layers, full.n_tokens, n);
  out.v_computed = oracle::first_rows(full.v_computed, n_layers, full.n_tokens, n);
  return out;
}

ErrorBounds derive_error_bounds(const Config& config, const Weights& weights,
                                std::span<const int32_t> tokens, KvDtype kv_dtype,
                                const ArithmeticTraits& arithmetic, oracle::Output* value_track) {
  const int T = static_cast<int>(tokens.size());
  Pass pass(config, weights, kv_dtype, arithmetic, /*windows=*/true);
  // Token t is fed at position t: the cells are the positions, in order.
  for (int32_t token : tokens) pass.feed(token);
  ErrorBounds out;
  out.n_tokens = T;
  out.quantizer = arithmetic.kv_quantizer;
  out.logits = std::move(pass.logit_bounds);  // [T][V]
  out.k = pass.gather(&CellLayer::k_bound);   // [L][T][KVH][D]
  out.v = pass.gather(&CellLayer::v_bound);   // [L][T][KVH][D]
  // q8_0's pre-storage bounds, of K and V each where its type is q8_0.
  if (kv_dtype == KvDtype::kQ8_0)
    out.k_computed = pass.gather(&CellLayer::k_comp);  // [L][T][KVH][D]
  if (arithmetic.v_dtype.value_or(kv_dtype) == KvDtype::kQ8_0)
    out.v_computed = pass.gather(&CellLayer::v_comp);  // [L][T][KVH][D]
  if (value_track != nullptr) {
    value_track->n_tokens = T;
    value_track->logits = std::move(pass.logit_values);  // [T][V]
    value_track->k = pass.gather(&CellLayer::k);         // [L][T][KVH][D]
    value_track->v = pass.gather(&CellLayer::v);         // [L][T][KVH][D]
  }
  return out;
}

HistoryBounds derive_history_bounds(const Config& config, const Weights& weights,
                                    std::span<const oracle::Event> events, KvDtype kv_dtype,
                                    const ArithmeticTraits& arithmetic) {
  using Kind = oracle::Event::Kind;
  // As oracle::replay, the history knows no sliding window.
  Pass pass(config, weights, kv_dtype, arithmetic, /*windows=*/false);
  for (const oracle::Event& e : events) {
    const size_t C = pass.positions().size();
    if (e.kind == Kind::kTruncate || e.kind == Kind::kErase) {
      std::vector<bool> kept(C, true);
      for (size_t i = 0; i < C; ++i) {
        const int32_t p = pass.positions()[i];
        kept[i] = e.kind == Kind::kTruncate ? i + size_t(e.n) < C : p < e.p0 || p >= e.p1;
      }
      pass.keep(kept);
    } else if (e.kind == Kind::kShift) {
      pass.shift(e.p0, e.p1, e.delta);
    } else if (e.kind == Kind::kDiv) {
      pass.div(e.p0, e.p1, e.delta);
    } else {
      pass.feed(e.token);
    }
  }
  HistoryBounds out;
  out.quantizer = arithmetic.kv_quantizer;
  out.logits = std::move(pass.logit_bounds);  // [feeds][V]
  out.k = pass.gather(&CellLayer::k_bound);   // [L][C][KVH][D]
  out.v = pass.gather(&CellLayer::v_bound);   // [L][C][KVH][D]
  if (kv_dtype == KvDtype::kQ8_0)
    out.k_computed = pass.gather(&CellLayer::k_comp);  // [L][C][KVH][D]
  if (arithmetic.v_dtype.value_or(kv_dtype) == KvDtype::kQ8_0)
    out.v_computed = pass.gather(&CellLayer::v_comp);  // [L][C][KVH][D]
  return out;
}

}  // namespace kvcheck
