#include "properties/tolerance.h"

#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvcheck {

double gamma_n(double n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

KvStorageError kv_storage_error(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return {0.0, 0.0};
    case KvDtype::kBF16:
      return {kv_dtype_unit_roundoff(dtype), 0x1p-134};
    case KvDtype::kF16:
      return {kv_dtype_unit_roundoff(dtype), 0x1p-25};
    case KvDtype::kQ8_0:
      return {0.0, 0.0, 0.5 + 0x1p-16};
  }
  return {};
}

double q8_element_bound(double computed, double stored_scale) {
  return computed + std::abs(stored_scale) * kv_storage_error(KvDtype::kQ8_0).per_scale;
}

double q8_scale_bound(double block_computed_max, double stored_scale) {
  return block_computed_max / 127 + kUnitRoundoff * std::abs(stored_scale) / (1 - kUnitRoundoff);
}

namespace {

constexpr double u = kUnitRoundoff;

inline double sq(double a) {
  return a * a;
}

// y = W x + b for rows [0, out), and the variance of the float result's error:
// sum_i W_oi^2 var_x_i from the inputs, plus the kernel's own rounding. An
// n-term float dot product (any order, FMA or not) plus the bias is, to first
// order, sum_k t_k (sum of at most n+1 roundings d_j): each d_j (|d_j| <= u,
// variance proxy u^2) scales a partial sum bounded by sum |t_k|, so the
// rounding's variance is at most (n+1) u^2 (sum |W_oi x_i| + |b_o|)^2, the
// probabilistic counterpart of gamma_{n+1} (sum |terms|).
//   w: [out][in];  b: [out] or empty;  x, var_x: [in];  y, var_y: [out].
void linear_var(const std::vector<float>& w, const std::vector<float>& b, const double* x,
                const double* var_x, int in, int out, double* y, double* var_y) {
  const double rounding = (in + 1) * u * u;
  const bool has_bias = !b.empty();
  for (int o = 0; o < out; ++o) {
    const float* row = w.data() + size_t(o) * size_t(in);
    double a = 0, m = 0, v = 0;
    // The order of a bound's sums is free: let the compiler vectorize them.
#pragma omp simd reduction(+ : a, m, v)
    for (int i = 0; i < in; ++i) {
      const double c = row[i];
      a += c * x[i];
      m += std::abs(c * x[i]);
      v += c * c * var_x[i];
    }
    const double bias = has_bias ? b[size_t(o)] : 0.0;
    y[o] = a + bias;
    var_y[o] = v + rounding * sq(m + std::abs(bias));
  }
}

// The family's norm of one row, with its error variance. First order, both
// norms are dy_i = g_i/r (dc_i - c_i (c.dc) / (E r^2)) (c = x for RMSNorm,
// c = x - mean(x) with dc = dx - mean(dx) for LayerNorm); with independent
// input errors the variance is (g_i/r)^2 (var_c_i + c_i^2 sum_j c_j^2 var_c_j /
// (E r^2)^2), dropping a negative cross term. The kernel's own rounding
// (docs/KERNELS.md, made probabilistic): the E-term sums contribute sqrt(E) u
// instead of gamma_E, the handful of single roundings (/E, +eps, sqrt, 1/,
// the products, the bias add) stay at their worst case 6u; LayerNorm's float
// mean is off by dm = sqrt(E) u sum|x| / E + u |mean|.
//   x, var_x, gain, bias: [E];  y, var_y: [E].
void norm_var(bool layer_norm, const double* x, const double* var_x, const std::vector<float>& gain,
              const std::vector<float>& bias, int width, double eps, double* y, double* var_y) {
  double mean = 0, sum_abs = 0, mean_var = 0;
  if (layer_norm) {
    for (int i = 0; i < width; ++i) mean += x[i], sum_abs += std::abs(x[i]), mean_var += var_x[i];
    mean /= width;
    mean_var /= double(width) * width;
  }
  double sum_sq = 0, coupling = 0;
  for (int i = 0; i < width; ++i) {
    const double c = x[i] - mean;
    sum_sq += c * c;
    coupling += c * c * (var_x[i] + mean_var);
  }
  const double r2 = sum_sq / width + eps, inv = 1.0 / std::sqrt(r2);
  coupling /= sq(width * r2);
  const double sqrt_w = std::sqrt(double(width));
  const double mean_error = layer_norm ? sqrt_w * u * sum_abs / width + u * std::abs(mean) : 0.0;
  const double relative = sqrt_w * u / 2 + 6 * u;
  for (int i = 0; i < width; ++i) {
    const double c = x[i] - mean, g = gain[size_t(i)];
    y[i] = c * inv * g + (layer_norm ? bias[size_t(i)] : 0.0);
    const double rounding =
        std::abs(g) * inv *
            (mean_error + (layer_norm ? u : 0.0) * std::abs(c) + std::abs(c) * relative) +
        (layer_norm ? u * std::abs(y[i]) : 0.0);
    var_y[i] = sq(g * inv) * (var_x[i] + mean_var + c * c * coupling) + sq(rounding);
  }
}

// Rotate-half RoPE of one head, in place, with its variance: the rotation
// mixes each pair's variances by cos^2 and sin^2; the float rotation rounds
// cos and sin to float and two products and a sum: 3u of each output's two
// terms. The engine and the oracle compute the angle with the same double
// operations, so it adds nothing, unless the engine computes the angle in
// float: then angle_error[i] bounds the angle's absolute error, and the
// output moves by at most that times the rotation's derivative. cos_angle and
// sin_angle hold cos and sin of position * inv_freq[i], computed once per
// position for every head.
//   head, var: [D];  cos_angle, sin_angle, angle_error: [D/2].
void rope_var(double* head, double* var, const std::vector<double>& cos_angle,
              const std::vector<double>& sin_angle, const std::vector<double>& angle_error,
              int dim) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double c = cos_angle[size_t(i)], s = sin_angle[size_t(i)];
    const double x1 = head[i], x2 = head[i + half], v1 = var[i], v2 = var[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
    const double ac = std::abs(c), as = std::abs(s), d = angle_error[size_t(i)];
    // d/dangle of (x1 c - x2 s) is -(x1 s + x2 c); of (x2 c + x1 s), x1 c - x2 s.
    var[i] = c * c * v1 + s * s * v2 + sq(3 * u * (std::abs(x1) * ac + std::abs(x2) * as)) +
             sq(d * (std::abs(x1) * as + std::abs(x2) * ac));
    var[i + half] = c * c * v2 + s * s * v1 + sq(3 * u * (std::abs(x2) * ac + std::abs(x1) * as)) +
                    sq(d * (std::abs(x2) * as + std::abs(x1) * ac));
  }
}

// What P6 compares, for one token's K or V ([KVH][D]) as computed (value,
// var): kConfidence deviations of the computed value, then storage's
// rounding of it at its worst, |x^ (1 + r) - x| <= |x^ - x| (1 + r) + r |x|
// + a (+ h s for q8_0: half a code of the block's scale s, at most
// fl((amax + the block's largest computed bound) / 127)). Attention reads
// the stored value, whose storage rounding enters its variance (updated in
// place) as one more bounded term. computed (q8_0 only, else null): the
// bound before storage.
//   value, var, bound, computed: [KVH][D].
void store_var(const double* value, double* var, double* bound, double* computed, int KVH, int D,
               KvDtype kv_dtype) {
  const KvStorageError storage = kv_storage_error(kv_dtype);
  const bool quantized = kv_dtype == KvDtype::kQ8_0;
  if (computed != nullptr) {
    for (int i = 0; i < KVH * D; ++i) computed[i] = kConfidence * std::sqrt(var[i]);
  }
  for (int g = 0; g < KVH; ++g) {
    for (int first = 0; first < D; first += int(kQ8Block)) {
      const int end = quantized ? std::min(D, first + int(kQ8Block)) : D;
      double amax = 0, computed_max = 0;
      for (int i = g * D + first; i < g * D + end; ++i) {
        amax = std::max(amax, std::abs(value[i]));
        computed_max = std::max(computed_max, kConfidence * std::sqrt(var[i]));
      }
      const double scale_max = (amax + computed_max) / 127 * (1 + u);
      for (int i = g * D + first; i < g * D + end; ++i) {
        const double stored = storage.relative * std::abs(value[i]) + storage.absolute +
                              storage.per_scale * scale_max;
        bound[i] = kConfidence * std::sqrt(var[i]) * (1 + storage.relative) + stored;
        var[i] = var[i] * sq(1 + storage.relative) + stored * stored;
      }
      if (!quantized) break;
    }
  }
}

// Scratch of attend_var, sized once per pass.
struct AttendScratch {
  std::vector<double> p, var_sigma;               // [keys] one query head
  std::vector<double> o_sum, o_var, o_magnitude;  // [D] one query head
};

// One query position's attention over keys 0..n_keys-1 (rows of k/v), with
// the error variance of its output (docs/TOLERANCE.md, "Attention").
//   q_t, var_q_t: [H][D];  k, var_k, v, var_v: [n_keys][KVH][D];  att, var_att: [H][D].
void attend_var(const double* q_t, const double* var_q_t, const double* k, const double* var_k,
                const double* v, const double* var_v, int n_keys, int H, int group, int D,
                AttendScratch& s, double* att, double* var_att) {
  const auto sz = [](int n) { return static_cast<size_t>(n); };
  const int KV = H / group * D;
  const double scale = 1.0 / std::sqrt(double(D));
  // dot of D, * scale, the float scale
  const double score_rounding = (D + 2) * u * u * scale * scale;
  const double exp_var = sq(kExpRelativeError);
  const double sum_rounding = n_keys * u * u;
  if (s.p.size() < sz(n_keys)) s.p.resize(sz(n_keys)), s.var_sigma.resize(sz(n_keys));
  s.o_sum.resize(sz(D)), s.o_var.resize(sz(D)), s.o_magnitude.resize(sz(D));
  for (int hq = 0; hq < H; ++hq) {
    const int g = hq / group;
    const double* qh = q_t + sz(hq) * sz(D);
    const double* vqh = var_q_t + sz(hq) * sz(D);
    // Score s_j = scale q.k_j: first-order variance scale^2 sum (k^2 var_q
    // + q^2 var_k) plus the dot product's rounding.
    double max_score = -INFINITY;
    for (int j = 0; j < n_keys; ++j) {
      const size_t kv_at = sz(j) * sz(KV) + sz(g) * sz(D);
      const double* kj = k + kv_at;
      const double* vkj = var_k + kv_at;
      double dot = 0, abs_dot = 0, var = 0;
      for (int d = 0; d < D; ++d) {
        dot += qh[d] * kj[d];
        abs_dot += std::abs(qh[d] * kj[d]);
        var += kj[d] * kj[d] * vqh[d] + qh[d] * qh[d] * vkj[d];
      }
      s.p[sz(j)] = dot * scale;
      s.var_sigma[sz(j)] = scale * scale * var + score_rounding * abs_dot * abs_dot;
      max_score = std::max(max_score, s.p[sz(j)]);
    }
    // Weight j is exp(s_j - max) (1 + sigma_j): score error, the float
    // rounding of s_j - max and exp's own error (kept at its worst).
    double total = 0;
    for (int j = 0; j < n_keys; ++j) {
      const double shifted = s.p[sz(j)] - max_score;
      s.var_sigma[sz(j)] += sq(u * shifted) + exp_var;
      s.p[sz(j)] = std::exp(shifted);
      total += s.p[sz(j)];
    }
    for (int j = 0; j < n_keys; ++j) s.p[sz(j)] /= total;
    // o = sum p_j v_j; first order do = sum p_j dv_j + sum p_j sigma_j (v_j - o)
    // (a shift common to all sigma_j cancels); then the float sums
    // (n_keys terms each) and the division.
    double* o = att + sz(hq) * sz(D);
    double* var_o = var_att + sz(hq) * sz(D);
    // Each of the D sums runs over the keys in order j = 0, 1, ...; the
    // key loop is outside so the rows of v are read contiguously.
    std::fill(s.o_sum.begin(), s.o_sum.end(), 0.0);
    for (int j = 0; j < n_keys; ++j) {
      const double pj = s.p[sz(j)];
      const double* vj = v + sz(j) * sz(KV) + sz(g) * sz(D);
      for (int d = 0; d < D; ++d) s.o_sum[sz(d)] += pj * vj[d];
    }
    std::fill(s.o_var.begin(), s.o_var.end(), 0.0);
    std::fill(s.o_magnitude.begin(), s.o_magnitude.end(), 0.0);
    for (int j = 0; j < n_keys; ++j) {
      const double pj = s.p[sz(j)], sigma = s.var_sigma[sz(j)];
      const size_t at = sz(j) * sz(KV) + sz(g) * sz(D);
      const double* vj = v + at;
      const double* vvj = var_v + at;
      for (int d = 0; d < D; ++d) {
        s.o_var[sz(d)] += pj * pj * (vvj[d] + sigma * sq(vj[d] - s.o_sum[sz(d)]));
        s.o_magnitude[sz(d)] += pj * std::abs(vj[d]);
      }
    }
    for (int d = 0; d < D; ++d) {
      const double value = s.o_sum[sz(d)];
      o[d] = value;
      var_o[d] = s.o_var[sz(d)] + sum_rounding * sq(s.o_magnitude[sz(d)] + std::abs(value)) +
                 sq(u * value);
    }
  }
}

// Buffers of mlp_var.
struct MlpScratch {
  std::vector<double> h, var_h;        // [E] normed row
  std::vector<double> up, var_up;      // [F]
  std::vector<double> gate, var_gate;  // [F] llama
  std::vector<double> proj, var_proj;  // [E] the block's output
  MlpScratch(int E, int F)
      : h(size_t(E)),
        var_h(size_t(E)),
        up(size_t(F)),
        var_up(size_t(F)),
        gate(size_t(F)),
        var_gate(size_t(F)),
        proj(size_t(E)),
        var_proj(size_t(E)) {}
};

// The feed-forward block of one position with its residual add, values and
// variances in place.   xt, vxt: [E].
void mlp_var(bool gpt2, const LayerWeights& w, int E, int F, double eps, double* xt, double* vxt,
             MlpScratch& b) {
  const auto sz = [](int n) { return static_cast<size_t>(n); };
  norm_var(gpt2, xt, vxt, w.mlp_norm, w.mlp_norm_bias, E, eps, b.h.data(), b.var_h.data());
  if (gpt2) {
    linear_var(w.w_up, w.b_up, b.h.data(), b.var_h.data(), E, F, b.up.data(), b.var_up.data());
    // GELU: the input variance through gelu'^2; rounding of inner =
    // (x^3 k + x) c: 3 roundings on the x term (add, product, float c)
    // and 7 on the cubic (three products, float k, add, product, float
    // c); tanh's ulp error plus (1 - t^2) times inner's; then
    // (t + 1) x / 2 rounds twice. All kept at their worst.
    const double c = std::sqrt(2.0 / std::numbers::pi), kc = 0.044715;
    for (int i = 0; i < F; ++i) {
      const double z = b.up[sz(i)], az = std::abs(z);
      const double th = std::tanh(c * (z + kc * z * z * z));
      const double sech2 = 1 - th * th;
      const double derivative = 0.5 * (1 + th) + 0.5 * z * sech2 * c * (1 + 3 * kc * z * z);
      const double dt = sech2 * (3 * u * c * az + 7 * u * c * kc * az * az * az) +
                        kTanhRelativeError * std::abs(th);
      const double y = 0.5 * z * (1 + th);
      const double rounding = az / 2 * (dt + u * std::abs(1 + th)) + u * std::abs(y);
      b.up[sz(i)] = y;
      b.var_up[sz(i)] = sq(derivative) * b.var_up[sz(i)] + sq(rounding);
    }
  } else {
    linear_var(w.w_gate, {}, b.h.data(), b.var_h.data(), E, F, b.gate.data(), b.var_gate.data());
    linear_var(w.w_up, {}, b.h.data(), b.var_h.data(), E, F, b.up.data(), b.var_up.data());
    // silu(g) up: variances through silu'(g) up and silu(g); rounding:
    // exp(-g)'s ulp error enters g / (1 + e) scaled by e / (1 + e), then
    // add, divide, multiply: 3u, all at their worst.
    for (int i = 0; i < F; ++i) {
      const double g = b.gate[sz(i)];
      const double e = std::exp(-g);
      const double sigma = 1 / (1 + e);
      const double silu = g * sigma;
      const double derivative = sigma * (1 + g * (1 - sigma));
      const double y = silu * b.up[sz(i)];
      const double rounding = std::abs(y) * (kExpRelativeError * e * sigma + 3 * u);
      b.var_up[sz(i)] = sq(derivative * b.up[sz(i)]) * b.var_gate[sz(i)] +
                        sq(silu) * b.var_up[sz(i)] + sq(rounding);
      b.up[sz(i)] = y;
    }
  }
  linear_var(w.w_down, w.b_down, b.up.data(), b.var_up.data(), F, E, b.proj.data(),
             b.var_proj.data());
  for (int e = 0; e < E; ++e) {
    xt[e] += b.proj[sz(e)];
    vxt[e] += b.var_proj[sz(e)] + sq(u * xt[e]);
  }
}

// Angles in float, as llama.cpp computes them (ggml-cpu rope_f32, for fed
// keys and for a shift's re-rotation alike): scale = powf(base, -2.0f / D),
// then angle_i = pos * scale^i by i float products. scale's relative error:
// u for base as a float, ln(base) 2/D u for the rounded exponent, 2u for
// powf (within 1 ulp); each product adds u. To first order
// |angle_i error| <= |angle_i| * i * (scale error + u): this returns the
// factor after i.
double float_angle_error_per_step(const Config& config) {
  const double scale_error = (1 + std::log(config.rope_theta) * 2.0 / config.head_dim + 2) * u;
  return scale_error + u;
}

}  // namespace

ErrorBounds prefix(const ErrorBounds& full, int n, int n_layers) {
  ErrorBounds out;
  out.n_tokens = n;
  out.logits = oracle::first_rows(full.logits, 1, full.n_tokens, n);
  out.k = oracle::first_rows(full.k, n_layers, full.n_tokens, n);
  out.v = oracle::first_rows(full.v, n_layers, full.n_tokens, n);
  out.k_computed = oracle::first_rows(full.k_computed, n_layers, full.n_tokens, n);
  out.v_computed = oracle::first_rows(full.v_computed, n_layers, full.n_tokens, n);
  return out;
}

ErrorBounds derive_error_bounds(const Config& config, const Weights& weights,
                                std::span<const int32_t> tokens, KvDtype kv_dtype,
                                bool rope_angles_in_float) {
  const int T = static_cast<int>(tokens.size());
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, F = config.d_ff, V = config.vocab, Q = config.q_width(),
            KV = config.kv_width(), group = config.group();
  const bool gpt2 = config.family == Family::kGpt2;
  const auto sz = [](int n) { return static_cast<size_t>(n); };
  const size_t t_count = sz(T);

  ErrorBounds out;
  out.n_tokens = T;
  out.logits.assign(t_count * sz(V), 0.0);      // [T][V]
  out.k.assign(sz(L) * t_count * sz(KV), 0.0);  // [L][T][KVH][D]
  out.v.assign(sz(L) * t_count * sz(KV), 0.0);  // [L][T][KVH][D]
  const bool quantized = kv_dtype == KvDtype::kQ8_0;
  if (quantized) {
    out.k_computed.assign(out.k.size(), 0.0);  // [L][T][KVH][D]
    out.v_computed.assign(out.v.size(), 0.0);  // [L][T][KVH][D]
  }
  if (T == 0) return out;

  // Values are the exact activations (double); var_* their error variances.
  std::vector<double> x(t_count * sz(E)), var_x(x.size());   // [T][E] residual stream
  std::vector<double> h(sz(E)), var_h(sz(E));                // [E] normed row
  std::vector<double> q(t_count * sz(Q)), var_q(q.size());   // [T][H][D] after RoPE
  std::vector<double> k(t_count * sz(KV)), var_k(k.size());  // [T][KVH][D] as cached
  std::vector<double> v(t_count * sz(KV)), var_v(v.size());  // [T][KVH][D] as cached
  std::vector<double> att(sz(Q)), var_att(sz(Q));            // [H][D] one position
  std::vector<double> proj(sz(E)), var_proj(sz(E));          // [E] a block's output
  AttendScratch scratch;                                     // one query head
  MlpScratch mlp(E, F);                                      // one position
  std::vector<double> inv_freq(sz(D / 2));                   // [D/2] RoPE frequencies
  for (int i = 0; i < D / 2; ++i) inv_freq[sz(i)] = std::pow(config.rope_theta, -2.0 * i / D);
  std::vector<double> cos_angle(sz(D / 2)), sin_angle(sz(D / 2));  // [D/2] at one position
  std::vector<double> angle_error(sz(D / 2), 0.0);                 // [D/2] at one position
  const double angle_error_per_step = float_angle_error_per_step(config);

  for (int t = 0; t < T; ++t) {
    const float* token_row = weights.tok_embedding.data() + sz(tokens[sz(t)]) * sz(E);
    for (int e = 0; e < E; ++e) {
      const size_t at = sz(t) * sz(E) + sz(e);
      x[at] = token_row[e];
      var_x[at] = 0;  // a copied embedding row is exact
      if (gpt2) {
        x[at] += weights.pos_embedding[at];
        var_x[at] = sq(u * x[at]);  // one float add
      }
    }
  }

  for (int l = 0; l < L; ++l) {
    const LayerWeights& w = weights.layers[sz(l)];
    for (int t = 0; t < T; ++t) {
      const size_t row = sz(t);
      norm_var(gpt2, x.data() + row * sz(E), var_x.data() + row * sz(E), w.attn_norm,
               w.attn_norm_bias, E, config.norm_eps, h.data(), var_h.data());
      double* qt = q.data() + row * sz(Q);
      double* vqt = var_q.data() + row * sz(Q);
      double* kt = k.data() + row * sz(KV);
      double* vkt = var_k.data() + row * sz(KV);
      double* vt = v.data() + row * sz(KV);
      double* vvt = var_v.data() + row * sz(KV);
      linear_var(w.wq, w.bq, h.data(), var_h.data(), E, Q, qt, vqt);
      linear_var(w.wk, w.bk, h.data(), var_h.data(), E, KV, kt, vkt);
      linear_var(w.wv, w.bv, h.data(), var_h.data(), E, KV, vt, vvt);
      if (!gpt2) {
        for (int i = 0; i < D / 2; ++i) {
          const double angle = t * inv_freq[sz(i)];
          cos_angle[sz(i)] = std::cos(angle);
          sin_angle[sz(i)] = std::sin(angle);
          if (rope_angles_in_float) angle_error[sz(i)] = angle * i * angle_error_per_step;
        }
        for (int hq = 0; hq < H; ++hq) {
          rope_var(qt + hq * D, vqt + hq * D, cos_angle, sin_angle, angle_error, D);
        }
        for (int g = 0; g < KVH; ++g) {
          rope_var(kt + g * D, vkt + g * D, cos_angle, sin_angle, angle_error, D);
        }
      }
      // What P6 compares (store_var).
      double* k_bound = out.k.data() + (sz(l) * t_count + row) * sz(KV);
      double* v_bound = out.v.data() + (sz(l) * t_count + row) * sz(KV);
      for (int kind = 0; kind < 2; ++kind) {
        double* computed = nullptr;
        if (quantized) {
          computed = (kind == 0 ? out.k_computed.data() : out.v_computed.data()) +
                     (sz(l) * t_count + row) * sz(KV);
        }
        store_var(kind == 0 ? kt : vt, kind == 0 ? vkt : vvt, kind == 0 ? k_bound : v_bound,
                  computed, KVH, D, kv_dtype);
      }
    }

    // A windowed layer's query at t reads keys first..t (docs/OPERATIONS.md).
    const int window = config.windowed(l) ? config.sliding_window : 0;
    for (int t = 0; t < T; ++t) {
      const int first = window > 0 ? std::max(0, t + 1 - window) : 0;
      const int n_keys = t + 1;
      const size_t skip = sz(first) * sz(KV);  // keys before the window
      attend_var(q.data() + sz(t) * sz(Q), var_q.data() + sz(t) * sz(Q), k.data() + skip,
                 var_k.data() + skip, v.data() + skip, var_v.data() + skip, n_keys - first, H,
                 group, D, scratch, att.data(), var_att.data());
      linear_var(w.wo, w.bo, att.data(), var_att.data(), Q, E, proj.data(), var_proj.data());
      for (int e = 0; e < E; ++e) {
        const size_t at = sz(t) * sz(E) + sz(e);
        x[at] += proj[sz(e)];
        var_x[at] += var_proj[sz(e)] + sq(u * x[at]);  // the residual add rounds once
      }
    }

    for (int t = 0; t < T; ++t) {
      double* xt = x.data() + sz(t) * sz(E);
      double* vxt = var_x.data() + sz(t) * sz(E);
      mlp_var(gpt2, w, E, F, config.norm_eps, xt, vxt, mlp);
    }
  }

  std::vector<double> logits(sz(V));  // [V] values; only their variances are used
  for (int t = 0; t < T; ++t) {
    norm_var(gpt2, x.data() + sz(t) * sz(E), var_x.data() + sz(t) * sz(E), weights.final_norm,
             weights.final_norm_bias, E, config.norm_eps, h.data(), var_h.data());
    double* bound = out.logits.data() + sz(t) * sz(V);
    linear_var(weights.lm_head, {}, h.data(), var_h.data(), E, V, logits.data(), bound);
    for (int i = 0; i < V; ++i) bound[i] = kConfidence * std::sqrt(bound[i]);
  }
  return out;
}

HistoryBounds derive_history_bounds(const Config& config, const Weights& weights,
                                    std::span<const oracle::Event> events, KvDtype kv_dtype,
                                    bool rope_angles_in_float) {
  using Kind = oracle::Event::Kind;
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, F = config.d_ff, V = config.vocab, Q = config.q_width(),
            KV = config.kv_width(), group = config.group();
  const auto sz = [](int n) { return static_cast<size_t>(n); };
  const bool quantized = kv_dtype == KvDtype::kQ8_0;
  // Per layer, the cells as the engine holds them: value and error variance
  // of the stored K/V, and P6's bound (and q8_0's pre-storage bound).
  struct Layer {
    std::vector<double> k, var_k, v, var_v, k_bound, v_bound, k_comp, v_comp;  // [C][KVH][D]
  };
  std::vector<Layer> cells(sz(L));
  std::vector<int32_t> positions;  // [C]
  HistoryBounds out;
  std::vector<double> x(sz(E)), var_x(sz(E)), h(sz(E)), var_h(sz(E));      // [E] one position
  std::vector<double> q(sz(Q)), var_q(sz(Q)), att(sz(Q)), var_att(sz(Q));  // [H][D]
  std::vector<double> k(sz(KV)), var_k(sz(KV)), v(sz(KV)), var_v(sz(KV));  // [KVH][D]
  std::vector<double> kb(sz(KV)), vb(sz(KV)), kc(sz(KV)), vc(sz(KV));      // [KVH][D]
  std::vector<double> proj(sz(E)), var_proj(sz(E));                        // [E]
  std::vector<double> inv_freq(sz(D / 2));  // [D/2] RoPE frequencies, as the engine's
  for (int i = 0; i < D / 2; ++i) inv_freq[sz(i)] = std::pow(config.rope_theta, -2.0 * i / D);
  std::vector<double> cos_angle(sz(D / 2)), sin_angle(sz(D / 2));  // [D/2]
  std::vector<double> angle_error(sz(D / 2), 0.0);                 // [D/2]
  const double angle_error_per_step = float_angle_error_per_step(config);
  // A fed token's angles are position * freq, a shift's delta * freq: an
  // engine with float angles errs in each by the same rule.
  const auto angles = [&](int angle_position) {
    for (int i = 0; i < D / 2; ++i) {
      const double angle = angle_position * inv_freq[sz(i)];
      cos_angle[sz(i)] = std::cos(angle);
      sin_angle[sz(i)] = std::sin(angle);
      if (rope_angles_in_float) angle_error[sz(i)] = std::abs(angle) * i * angle_error_per_step;
    }
  };
  AttendScratch scratch;
  MlpScratch mlp(E, F);
  const auto keep = [&](const std::vector<bool>& kept) {
    for (Layer& c : cells) {
      for (std::vector<double>* a :
           {&c.k, &c.var_k, &c.v, &c.var_v, &c.k_bound, &c.v_bound, &c.k_comp, &c.v_comp}) {
        size_t to = 0;
        for (size_t i = 0; i < kept.size(); ++i) {
          if (!kept[i]) continue;
          std::copy_n(a->begin() + std::ptrdiff_t(i * sz(KV)), KV,
                      a->begin() + std::ptrdiff_t(to * sz(KV)));
          ++to;
        }
        a->resize(to * sz(KV));
      }
    }
    size_t to = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i]) positions[to++] = positions[i];
    }
    positions.resize(to);
  };
  for (const oracle::Event& e : events) {
    if (e.kind == Kind::kTruncate || e.kind == Kind::kErase) {
      std::vector<bool> kept(positions.size(), true);
      for (size_t i = 0; i < positions.size(); ++i) {
        kept[i] = e.kind == Kind::kTruncate ? i + size_t(e.n) < positions.size()
                                            : positions[i] < e.p0 || positions[i] >= e.p1;
      }
      keep(kept);
      continue;
    }
    if (e.kind == Kind::kShift) {
      // The engine reads each moved cell's stored key, rotates it by delta
      // in float and stores it again.
      angles(e.delta);
      for (size_t c = 0; c < positions.size(); ++c) {
        if (positions[c] < e.p0 || positions[c] >= e.p1) continue;
        positions[c] += e.delta;
        for (Layer& layer : cells) {
          double* value = layer.k.data() + c * sz(KV);
          double* var = layer.var_k.data() + c * sz(KV);
          for (int g = 0; g < KVH; ++g) {
            rope_var(value + g * D, var + g * D, cos_angle, sin_angle, angle_error, D);
          }
          store_var(value, var, layer.k_bound.data() + c * sz(KV),
                    quantized ? layer.k_comp.data() + c * sz(KV) : nullptr, KVH, D, kv_dtype);
        }
      }
      continue;
    }
    int position = 0;
    for (int32_t p : positions) position = std::max(position, p + 1);
    positions.push_back(position);
    const float* token_row = weights.tok_embedding.data() + sz(e.token) * sz(E);
    for (int d = 0; d < E; ++d) x[sz(d)] = token_row[d], var_x[sz(d)] = 0;  // an exact copy
    angles(position);
    for (int l = 0; l < L; ++l) {
      const LayerWeights& w = weights.layers[sz(l)];
      Layer& c = cells[sz(l)];
      norm_var(false, x.data(), var_x.data(), w.attn_norm, w.attn_norm_bias, E, config.norm_eps,
               h.data(), var_h.data());
      linear_var(w.wq, w.bq, h.data(), var_h.data(), E, Q, q.data(), var_q.data());
      linear_var(w.wk, w.bk, h.data(), var_h.data(), E, KV, k.data(), var_k.data());
      linear_var(w.wv, w.bv, h.data(), var_h.data(), E, KV, v.data(), var_v.data());
      for (int hq = 0; hq < H; ++hq) {
        rope_var(q.data() + hq * D, var_q.data() + hq * D, cos_angle, sin_angle, angle_error, D);
      }
      for (int g = 0; g < KVH; ++g) {
        rope_var(k.data() + g * D, var_k.data() + g * D, cos_angle, sin_angle, angle_error, D);
      }
      store_var(k.data(), var_k.data(), kb.data(), quantized ? kc.data() : nullptr, KVH, D,
                kv_dtype);
      store_var(v.data(), var_v.data(), vb.data(), quantized ? vc.data() : nullptr, KVH, D,
                kv_dtype);
      const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
        to.insert(to.end(), from.begin(), from.end());
      };
      append(c.k, k), append(c.var_k, var_k), append(c.v, v), append(c.var_v, var_v);
      append(c.k_bound, kb), append(c.v_bound, vb), append(c.k_comp, kc), append(c.v_comp, vc);
      attend_var(q.data(), var_q.data(), c.k.data(), c.var_k.data(), c.v.data(), c.var_v.data(),
                 int(positions.size()), H, group, D, scratch, att.data(), var_att.data());
      linear_var(w.wo, w.bo, att.data(), var_att.data(), Q, E, proj.data(), var_proj.data());
      for (int d = 0; d < E; ++d) {
        x[sz(d)] += proj[sz(d)];
        var_x[sz(d)] += var_proj[sz(d)] + sq(u * x[sz(d)]);  // the residual add rounds once
      }
      mlp_var(false, w, E, F, config.norm_eps, x.data(), var_x.data(), mlp);
    }
    norm_var(false, x.data(), var_x.data(), weights.final_norm, weights.final_norm_bias, E,
             config.norm_eps, h.data(), var_h.data());
    std::vector<double> logits(sz(V)), bound(sz(V));  // [V]
    linear_var(weights.lm_head, {}, h.data(), var_h.data(), E, V, logits.data(), bound.data());
    for (double b : bound) out.logits.push_back(kConfidence * std::sqrt(b));
  }
  for (const Layer& c : cells) {
    out.k.insert(out.k.end(), c.k_bound.begin(), c.k_bound.end());
    out.v.insert(out.v.end(), c.v_bound.begin(), c.v_bound.end());
    if (quantized) {
      out.k_computed.insert(out.k_computed.end(), c.k_comp.begin(), c.k_comp.end());
      out.v_computed.insert(out.v_computed.end(), c.v_comp.begin(), c.v_comp.end());
    }
  }
  return out;
}

}  // namespace kvcheck
