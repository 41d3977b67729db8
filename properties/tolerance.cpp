#include "properties/tolerance.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvcheck {

double gamma_n(double n) { return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff); }

KvStorageError kv_storage_error(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return {0.0, 0.0};
    case KvDtype::kBF16: return {kv_dtype_unit_roundoff(dtype), 0x1p-134};
    case KvDtype::kF16: return {kv_dtype_unit_roundoff(dtype), 0x1p-25};
  }
  return {};
}

namespace {

constexpr double u = kUnitRoundoff;

// y = W x + b and its error bound. The engine's float dot product of length
// `in` plus the bias is within gamma_{in+1} (sum |W_oi x_i| + |b_o|) of the
// exact result on its own (rounded) inputs; errors dx in the inputs add
// sum |W_oi| dx_i. Both are one pass over |W|: sum |W_oi| (dx_i + g |x_i|).
//   w: [out][in];  b: [out] or empty;  x, dx: [in];  y, dy: [out];  z: [in] scratch.
void linear_bound(const std::vector<float>& w, const std::vector<float>& b, const double* x,
                  const double* dx, int in, int out, double* y, double* dy, double* z) {
  const double g = gamma_n(in + 1);
  for (int i = 0; i < in; ++i) z[i] = dx[i] + g * std::abs(x[i]);
  const bool has_bias = !b.empty();
  int o = 0;
  // Four outputs at a time: independent accumulator chains instead of one
  // latency-bound chain (summation order is irrelevant to a bound).
  for (; o + 4 <= out; o += 4) {
    const float* w0 = w.data() + size_t(o) * size_t(in);
    const float* w1 = w0 + in;
    const float* w2 = w1 + in;
    const float* w3 = w2 + in;
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0, e0 = 0, e1 = 0, e2 = 0, e3 = 0;
    for (int i = 0; i < in; ++i) {
      const double xi = x[i], zi = z[i];
      a0 += w0[i] * xi, e0 += std::abs(w0[i]) * zi;
      a1 += w1[i] * xi, e1 += std::abs(w1[i]) * zi;
      a2 += w2[i] * xi, e2 += std::abs(w2[i]) * zi;
      a3 += w3[i] * xi, e3 += std::abs(w3[i]) * zi;
    }
    const double acc[4] = {a0, a1, a2, a3}, err[4] = {e0, e1, e2, e3};
    for (int j = 0; j < 4; ++j) {
      const double bias = has_bias ? b[size_t(o + j)] : 0.0;
      y[o + j] = acc[j] + bias;
      dy[o + j] = err[j] + g * std::abs(bias);
    }
  }
  for (; o < out; ++o) {
    const float* wr = w.data() + size_t(o) * size_t(in);
    double a = 0, e = 0;
    for (int i = 0; i < in; ++i) a += wr[i] * x[i], e += std::abs(wr[i]) * z[i];
    const double bias = has_bias ? b[size_t(o)] : 0.0;
    y[o] = a + bias;
    dy[o] = e + g * std::abs(bias);
  }
}

// RMSNorm y = g x / r, r = sqrt(mean x^2 + eps). Propagated: the Jacobian
// dy_i = g_i/r (dx_i - x_i (x.dx) / (E r^2)); rounding: |y_i| (gamma_E/2 + 6u)
// (squares summed, /E, +eps, sqrt, 1/, two products; docs/KERNELS.md).
//   x, dx, gain: [E];  y, dy: [E].
void rms_norm_bound(const double* x, const double* dx, const std::vector<float>& gain, int width,
                    double eps, double* y, double* dy) {
  double sum_sq = 0, x_dx = 0;
  for (int i = 0; i < width; ++i) sum_sq += x[i] * x[i], x_dx += std::abs(x[i]) * dx[i];
  const double inv = 1.0 / std::sqrt(sum_sq / width + eps);
  const double coupling = x_dx * inv * inv / width;
  const double rounding = gamma_n(width) / 2 + 6 * u;
  for (int i = 0; i < width; ++i) {
    const double g = gain[size_t(i)];
    y[i] = x[i] * inv * g;
    dy[i] = std::abs(g) * inv * (dx[i] + std::abs(x[i]) * coupling) + std::abs(y[i]) * rounding;
  }
}

// LayerNorm y = g c / r + b, c = x - mean, r = sqrt(mean c^2 + eps).
// Propagated: dc_i = dx_i - mean(dx), dy_i = g_i/r (dc_i - c_i (c.dc) / (E r^2));
// rounding (docs/KERNELS.md): |g_i|/r (dm + u|c_i| + |c_i| (gamma_{E+1}/2 + 6u))
// + u |y_i|, dm = gamma_E sum|x| / E + u |mean| the error of the float mean.
//   x, dx, gain, bias: [E];  y, dy: [E].
void layer_norm_bound(const double* x, const double* dx, const std::vector<float>& gain,
                      const std::vector<float>& bias, int width, double eps, double* y,
                      double* dy) {
  double sum = 0, sum_abs = 0, sum_dx = 0;
  for (int i = 0; i < width; ++i) sum += x[i], sum_abs += std::abs(x[i]), sum_dx += dx[i];
  const double mean = sum / width, mean_dx = sum_dx / width;
  double var = 0, c_dc = 0;
  for (int i = 0; i < width; ++i) {
    const double c = x[i] - mean;
    var += c * c;
    c_dc += std::abs(c) * (dx[i] + mean_dx);
  }
  const double inv = 1.0 / std::sqrt(var / width + eps);
  const double coupling = c_dc * inv * inv / width;
  const double mean_error = gamma_n(width) * sum_abs / width + u * std::abs(mean);
  const double relative = gamma_n(width + 1) / 2 + 6 * u;
  for (int i = 0; i < width; ++i) {
    const double c = x[i] - mean, g = gain[size_t(i)];
    y[i] = c * inv * g + bias[size_t(i)];
    const double abs_c = std::abs(c);
    dy[i] = std::abs(g) * inv * ((dx[i] + mean_dx) + abs_c * coupling) +
            std::abs(g) * inv * (mean_error + u * abs_c + abs_c * relative) + u * std::abs(y[i]);
  }
}

// Rotate-half RoPE of one head at `position` with its bound. The rotation is
// orthogonal, so input errors mix with |cos|, |sin|; the float rotation rounds
// cos and sin (1 each) and two products and one sum: gamma_3 of each term's
// magnitude. The engine and the oracle compute the angle with the same double
// operations, so the angle itself adds nothing.
//   head, dhead: [D];  inv_freq: [D/2].
void rope_bound(double* head, double* dhead, const std::vector<double>& inv_freq, int position,
                int dim) {
  const int half = dim / 2;
  const double g = gamma_n(3);
  for (int i = 0; i < half; ++i) {
    const double angle = position * inv_freq[size_t(i)];
    const double c = std::cos(angle), s = std::sin(angle);
    const double x1 = head[i], x2 = head[i + half], d1 = dhead[i], d2 = dhead[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
    const double ac = std::abs(c), as = std::abs(s);
    dhead[i] = ac * d1 + as * d2 + g * (std::abs(x1) * ac + std::abs(x2) * as);
    dhead[i + half] = ac * d2 + as * d1 + g * (std::abs(x2) * ac + std::abs(x1) * as);
  }
}

// GELU (tanh form) of each element, with its bound. Propagated: |gelu'(x)| dx.
// Rounding: inner = (x^3 k + x) c takes 3 roundings on the x term (add, product,
// the float constant c) and 7 on the cubic term (three products, the float
// constant k, add, product, c); tanh is within its ulp error plus
// (1 - t^2) times the inner error; then (t + 1) x / 2 rounds twice.
//   x, dx: [n] in, overwritten by gelu(x) and its bound.
void gelu_bound(double* x, double* dx, int n) {
  const double c = std::sqrt(2.0 / std::numbers::pi), k = 0.044715;
  const double g3 = gamma_n(3), g7 = gamma_n(7);
  for (int i = 0; i < n; ++i) {
    const double v = x[i], av = std::abs(v);
    const double t = std::tanh(c * (v + k * v * v * v));
    const double sech2 = 1 - t * t;
    const double derivative = 0.5 * (1 + t) + 0.5 * v * sech2 * c * (1 + 3 * k * v * v);
    const double dt = sech2 * (g3 * c * av + g7 * c * k * av * av * av) +
                      kTanhRelativeError * std::abs(t);
    const double y = 0.5 * v * (1 + t);
    x[i] = y;
    dx[i] = std::abs(derivative) * dx[i] + av / 2 * (dt + u * std::abs(1 + t)) + u * std::abs(y);
  }
}

// y = silu(gate) * up with its bound. Propagated: |silu'(g)| dg |up| +
// |silu(g)| dup + |silu'(g)| dg dup; rounding: exp(-g)'s ulp error enters
// silu = g / (1 + e) scaled by e / (1 + e), then add, divide, multiply: 3u.
//   gate, dgate, up, dup: [n];  y, dy: [n].
void silu_mul_bound(const double* gate, const double* dgate, const double* up, const double* dup,
                    int n, double* y, double* dy) {
  for (int i = 0; i < n; ++i) {
    const double g = gate[i];
    const double e = std::exp(-g);
    const double sigma = 1 / (1 + e);
    const double silu = g * sigma;
    const double derivative = sigma * (1 + g * (1 - sigma));
    y[i] = silu * up[i];
    dy[i] = std::abs(derivative) * dgate[i] * (std::abs(up[i]) + dup[i]) +
            std::abs(silu) * dup[i] + std::abs(y[i]) * (kExpRelativeError * e * sigma + 3 * u);
  }
}

// x += a with its bound: the errors add, the float sum rounds once.
//   x, dx, a, da: [n].
void residual_bound(double* x, double* dx, const double* a, const double* da, int n) {
  for (int i = 0; i < n; ++i) {
    x[i] += a[i];
    dx[i] += da[i] + u * std::abs(x[i]);
  }
}

}  // namespace

ErrorBounds derive_error_bounds(const Config& config, const Weights& weights,
                                std::span<const int32_t> tokens, KvDtype kv_dtype) {
  const int T = static_cast<int>(tokens.size());
  const int L = config.n_layers, E = config.d_model, H = config.n_heads, KVH = config.n_kv_heads,
            D = config.head_dim, F = config.d_ff, V = config.vocab, Q = config.q_width(),
            KV = config.kv_width(), group = config.group();
  const bool gpt2 = config.family == Family::kGpt2;
  const KvStorageError storage = kv_storage_error(kv_dtype);
  const size_t t_count = size_t(T);

  ErrorBounds out;
  out.n_tokens = T;
  out.logits.assign(t_count * size_t(V), 0.0);                 // [T][V]
  out.k.assign(size_t(L) * t_count * size_t(KV), 0.0);         // [L][T][KVH][D]
  out.v.assign(size_t(L) * t_count * size_t(KV), 0.0);         // [L][T][KVH][D]
  if (T == 0) return out;

  std::vector<double> x(t_count * size_t(E)), dx(x.size());    // [T][E] residual stream
  std::vector<double> h(size_t(E)), dh(size_t(E));             // [E] normed row
  std::vector<double> q(t_count * size_t(Q)), dq(q.size());    // [T][H][D] after RoPE
  std::vector<double> k(t_count * size_t(KV)), dk(k.size());   // [T][KVH][D] as cached
  std::vector<double> v(t_count * size_t(KV)), dv(v.size());   // [T][KVH][D] as cached
  std::vector<double> att(size_t(Q)), datt(size_t(Q));         // [H][D] one position
  std::vector<double> proj(size_t(E)), dproj(size_t(E));       // [E] block output
  const int widest = std::max({E, F, Q});
  std::vector<double> z(size_t(widest));                       // linear_bound scratch
  std::vector<double> up(size_t(F)), dup(size_t(F));           // [F]
  std::vector<double> gate(size_t(F)), dgate(size_t(F));       // [F] llama
  std::vector<double> hidden(size_t(F)), dhidden(size_t(F));   // [F]
  std::vector<double> p(t_count), eta(t_count);                // [keys] one query head
  std::vector<double> inv_freq(size_t(D / 2));                 // [D/2] RoPE frequencies
  for (int i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(config.rope_theta, -2.0 * i / D);

  for (int t = 0; t < T; ++t) {
    const float* token_row = weights.tok_embedding.data() + size_t(tokens[size_t(t)]) * size_t(E);
    double* xt = x.data() + size_t(t) * size_t(E);
    double* dxt = dx.data() + size_t(t) * size_t(E);
    for (int e = 0; e < E; ++e) {
      xt[e] = token_row[e];
      dxt[e] = 0;  // a copy of the embedding row is exact
      if (gpt2) {
        xt[e] += weights.pos_embedding[size_t(t) * size_t(E) + size_t(e)];
        dxt[e] = u * std::abs(xt[e]);  // one float add
      }
    }
  }

  const auto norm = [&](const double* xt, const double* dxt, const std::vector<float>& gain,
                        const std::vector<float>& bias) {
    if (gpt2) {
      layer_norm_bound(xt, dxt, gain, bias, E, config.norm_eps, h.data(), dh.data());
    } else {
      rms_norm_bound(xt, dxt, gain, E, config.norm_eps, h.data(), dh.data());
    }
  };

  const double scale = 1.0 / std::sqrt(double(D));
  const double score_rounding = gamma_n(D + 2);  // dot of D, * scale, the float scale
  for (int l = 0; l < L; ++l) {
    const LayerWeights& w = weights.layers[size_t(l)];
    for (int t = 0; t < T; ++t) {
      const size_t row = size_t(t);
      norm(x.data() + row * size_t(E), dx.data() + row * size_t(E), w.attn_norm,
           w.attn_norm_bias);
      double* qt = q.data() + row * size_t(Q);
      double* dqt = dq.data() + row * size_t(Q);
      double* kt = k.data() + row * size_t(KV);
      double* dkt = dk.data() + row * size_t(KV);
      double* vt = v.data() + row * size_t(KV);
      double* dvt = dv.data() + row * size_t(KV);
      linear_bound(w.wq, w.bq, h.data(), dh.data(), E, Q, qt, dqt, z.data());
      linear_bound(w.wk, w.bk, h.data(), dh.data(), E, KV, kt, dkt, z.data());
      linear_bound(w.wv, w.bv, h.data(), dh.data(), E, KV, vt, dvt, z.data());
      if (!gpt2) {
        for (int hq = 0; hq < H; ++hq) rope_bound(qt + hq * D, dqt + hq * D, inv_freq, t, D);
        for (int hk = 0; hk < KVH; ++hk) rope_bound(kt + hk * D, dkt + hk * D, inv_freq, t, D);
      }
      // Storage rounds what was computed: |k^ (1 + r) - k| <= dk (1 + r) + r|k|.
      for (int i = 0; i < KV; ++i) {
        dkt[i] = dkt[i] * (1 + storage.relative) + storage.relative * std::abs(kt[i]) +
                 storage.absolute;
        dvt[i] = dvt[i] * (1 + storage.relative) + storage.relative * std::abs(vt[i]) +
                 storage.absolute;
      }
    }
    const size_t layer_offset = size_t(l) * t_count * size_t(KV);
    std::copy(dk.begin(), dk.end(), out.k.begin() + std::ptrdiff_t(layer_offset));
    std::copy(dv.begin(), dv.end(), out.v.begin() + std::ptrdiff_t(layer_offset));

    for (int t = 0; t < T; ++t) {
      const int n_keys = t + 1;
      const double sum_rounding = gamma_n(n_keys);
      for (int hq = 0; hq < H; ++hq) {
        const int g = hq / group;
        const double* qh = q.data() + size_t(t) * size_t(Q) + size_t(hq) * size_t(D);
        const double* dqh = dq.data() + size_t(t) * size_t(Q) + size_t(hq) * size_t(D);
        // Scores and their bounds: propagated |k| dq + |q| dk + dq dk, plus
        // the float dot product's own rounding.
        double max_score = -INFINITY;
        for (int j = 0; j < n_keys; ++j) {
          const size_t kv_at = size_t(j) * size_t(KV) + size_t(g) * size_t(D);
          const double* kj = k.data() + kv_at;
          const double* dkj = dk.data() + kv_at;
          double dot = 0, abs_dot = 0, prop = 0;
          for (int d = 0; d < D; ++d) {
            dot += qh[d] * kj[d];
            abs_dot += std::abs(qh[d] * kj[d]);
            prop += std::abs(kj[d]) * dqh[d] + std::abs(qh[d]) * dkj[d] + dqh[d] * dkj[d];
          }
          p[size_t(j)] = dot * scale;
          eta[size_t(j)] = scale * (prop + score_rounding * abs_dot);
          max_score = std::max(max_score, p[size_t(j)]);
        }
        // Each weight exp(s_j - max) is off by a factor exp(sigma_j) with
        // |sigma_j| <= eta_j: score error, the rounding of s_j - max
        // (u |s_j - max|) and exp's own error. A shift common to all cancels.
        double total = 0, eta_max = 0;
        for (int j = 0; j < n_keys; ++j) {
          const double shifted = p[size_t(j)] - max_score;
          eta[size_t(j)] += u * std::abs(shifted) + kExpRelativeError;
          eta_max = std::max(eta_max, eta[size_t(j)]);
          p[size_t(j)] = std::exp(shifted);
          total += p[size_t(j)];
        }
        for (int j = 0; j < n_keys; ++j) p[size_t(j)] /= total;
        // o' - o = sum_j p_j (e^sigma_j - 1)(v_j - o) / Z exactly, with
        // |e^sigma - 1| <= eta e^eta_max and Z >= e^-eta_max; the same factor
        // bounds sum p'_j dv_j. Then the float sums (gamma_n) and the division.
        const double factor = std::exp(2 * eta_max);
        double* out_h = att.data() + size_t(hq) * size_t(D);
        double* dout_h = datt.data() + size_t(hq) * size_t(D);
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j < n_keys; ++j) {
            o += p[size_t(j)] * v[size_t(j) * size_t(KV) + size_t(g) * size_t(D) + size_t(d)];
          }
          double value_error = 0, weight_error = 0, magnitude = 0;
          for (int j = 0; j < n_keys; ++j) {
            const size_t at = size_t(j) * size_t(KV) + size_t(g) * size_t(D) + size_t(d);
            value_error += p[size_t(j)] * dv[at];
            weight_error += p[size_t(j)] * eta[size_t(j)] * std::abs(v[at] - o);
            magnitude += p[size_t(j)] * std::abs(v[at]);
          }
          out_h[d] = o;
          dout_h[d] = factor * (value_error + weight_error) +
                      sum_rounding * (magnitude + std::abs(o)) + u * std::abs(o);
        }
      }
      linear_bound(w.wo, w.bo, att.data(), datt.data(), Q, E, proj.data(), dproj.data(),
                   z.data());
      residual_bound(x.data() + size_t(t) * size_t(E), dx.data() + size_t(t) * size_t(E),
                     proj.data(), dproj.data(), E);
    }

    for (int t = 0; t < T; ++t) {
      double* xt = x.data() + size_t(t) * size_t(E);
      double* dxt = dx.data() + size_t(t) * size_t(E);
      norm(xt, dxt, w.mlp_norm, w.mlp_norm_bias);
      if (gpt2) {
        linear_bound(w.w_up, w.b_up, h.data(), dh.data(), E, F, hidden.data(), dhidden.data(),
                     z.data());
        gelu_bound(hidden.data(), dhidden.data(), F);
      } else {
        linear_bound(w.w_gate, {}, h.data(), dh.data(), E, F, gate.data(), dgate.data(),
                     z.data());
        linear_bound(w.w_up, {}, h.data(), dh.data(), E, F, up.data(), dup.data(), z.data());
        silu_mul_bound(gate.data(), dgate.data(), up.data(), dup.data(), F, hidden.data(),
                       dhidden.data());
      }
      linear_bound(w.w_down, w.b_down, hidden.data(), dhidden.data(), F, E, proj.data(),
                   dproj.data(), z.data());
      residual_bound(xt, dxt, proj.data(), dproj.data(), E);
    }
  }

  std::vector<double> logits(size_t(V));  // [V] values, unused beyond the bound
  for (int t = 0; t < T; ++t) {
    norm(x.data() + size_t(t) * size_t(E), dx.data() + size_t(t) * size_t(E), weights.final_norm,
         weights.final_norm_bias);
    linear_bound(weights.lm_head, {}, h.data(), dh.data(), E, V, logits.data(),
                 out.logits.data() + size_t(t) * size_t(V), z.data());
  }
  return out;
}

}  // namespace kvcheck
