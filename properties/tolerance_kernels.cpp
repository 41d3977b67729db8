// The error models of the tolerance's per-position kernels: linear, norm,
// RoPE and the feed-forward block (attention is tolerance_attention.cpp,
// storage tolerance_storage.cpp). Each computes its value with the oracle's
// op and adds only the variance arithmetic (tolerance_kernels.h says why).
#include <cmath>
#include <numbers>
#include <span>

#include "oracle/ops.h"
#include "properties/tolerance.h"
#include "properties/tolerance_kernels.h"

namespace kvcheck::tolerance {

namespace {}  // namespace

// The variance of the float result's error: sum_i W_oi^2 var_x_i from the
// inputs, plus the kernel's own rounding. An n-term float dot product (any
// order, FMA or not) plus the bias is, to first order, sum_k t_k (sum of at
// most n+1 roundings d_j): each d_j (|d_j| <= u, variance proxy u^2) scales a
// partial sum bounded by sum |t_k|, so the rounding's variance is at most
// (n+1) u^2 (sum |W_oi x_i| + |b_o|)^2, the probabilistic counterpart of
// gamma_{n+1} (sum |terms|).
void linear_var(const std::vector<float>& w, const std::vector<float>& b, const double* x,
                const double* var_x, int in, int out, double* y, double* var_y,
                const ArithmeticModel& am) {
  oracle::linear(std::span<const double>(x, sz(in)), w, b, out, std::span<double>(y, sz(out)));
  const double rounding = (in + 1) * am.sum * am.sum;
  const bool has_bias = !b.empty();
  for (int o = 0; o < out; ++o) {
    const float* row = w.data() + sz(o) * sz(in);
    double m = 0, v = 0, terms = 0;
    // The order of a bound's sums is free: let the compiler vectorize them.
#pragma omp simd reduction(+ : m, v)
    for (int i = 0; i < in; ++i) {
      const double c = row[i];
      m += std::abs(c * x[i]);
      v += c * c * var_x[i];
    }
    const double bias = has_bias ? b[sz(o)] : 0.0;
    var_y[o] = v + rounding * sq(m + std::abs(bias));
    if (am.weight > 0) {
      // Each weight rounded once: independent relative errors of the terms.
      for (int i = 0; i < in; ++i) terms += sq(double(row[i]) * x[i]);
      var_y[o] += sq(am.weight) * (terms + sq(bias));
    }
    // The product's output and the bias add, each rounded to the activations.
    if (!am.output.none()) var_y[o] += (has_bias ? 2 : 1) * sq(am.output.of(m + std::abs(bias)));
  }
}

// First order, both norms are dy_i = g_i/r (dc_i - c_i (c.dc) / (E r^2))
// (c = x for RMSNorm, c = x - mean(x) with dc = dx - mean(dx) for
// LayerNorm); with independent input errors the variance is (g_i/r)^2
// (var_c_i + c_i^2 sum_j c_j^2 var_c_j / (E r^2)^2), dropping a negative
// cross term. The kernel's own rounding (docs/KERNELS.md, made
// probabilistic): the E-term sums contribute sqrt(E) u instead of gamma_E,
// the handful of single roundings (/E, +eps, sqrt, 1/, the products, the bias
// add) stay at their worst case 6u; LayerNorm's float mean is off by
// dm = sqrt(E) u sum|x| / E + u |mean|.
void norm_var(bool layer_norm, const double* x, const double* var_x, const std::vector<float>& gain,
              const std::vector<float>& bias, int width, double eps, double* y, double* var_y,
              const ArithmeticModel& am) {
  const std::span<const double> in(x, sz(width));  // [E]
  const std::span<double> normed(y, sz(width));    // [E]
  if (layer_norm) {
    oracle::layer_norm(in, gain, bias, eps, normed);
  } else {
    oracle::rms_norm(in, gain, eps, normed);
  }
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
  const double s1 = am.single;  // u, or the activations' where each op rounds to them
  const double mean_error =
      layer_norm ? sqrt_w * am.sum * sum_abs / width + s1 * std::abs(mean) : 0.0;
  const double relative = sqrt_w * am.sum / 2 + 6 * s1;
  for (int i = 0; i < width; ++i) {
    const double c = x[i] - mean, g = gain[sz(i)];
    const double rounding =
        std::abs(g) * inv *
            (mean_error + (layer_norm ? s1 : 0.0) * std::abs(c) + std::abs(c) * relative) +
        (layer_norm ? s1 * std::abs(y[i]) : 0.0);
    var_y[i] = sq(g * inv) * (var_x[i] + mean_var + c * c * coupling) + sq(rounding);
    if (am.weight > 0) {  // the gain (and bias) rounded once
      const double b = layer_norm ? std::abs(bias[sz(i)]) : 0.0;
      var_y[i] += sq(am.weight * (std::abs(g * c * inv) + b));
    }
    if (!am.output.none()) var_y[i] += sq(am.output.of(y[i]));
  }
}

// Angles in float, as llama.cpp computes them (ggml-cpu rope_f32, for fed
// keys and for a shift's re-rotation alike): scale = powf(base, -2.0f / D),
// then angle_i = pos * scale^i by i float products. scale's relative error:
// u for base as a float, ln(base) 2/D u for the rounded exponent, 2u for
// powf (within 1 ulp); each product adds u. To first order
// |angle_i error| <= |angle_i| * i * (scale error + u): this returns the
// factor after i.
double float_angle_error_per_step(double rope_theta, int head_dim) {
  const double scale_error = (1 + std::log(rope_theta) * 2.0 / head_dim + 2) * u;
  return scale_error + u;
}

// The engine and the oracle compute the angle with the same double
// operations, so it adds nothing, unless the engine computes the angle in
// float: then error[i] bounds the angle's absolute error.
void RopeAngles::at(int position, double theta, bool in_float, double error_per_step) {
  oracle::rope_cos_sin(position, theta, cos, sin);
  const int dim = int(2 * cos.size());
  for (size_t i = 0; i < cos.size(); ++i) {
    const double angle = position * std::pow(theta, -2.0 * double(i) / dim);
    error[i] = in_float ? std::abs(angle) * double(i) * error_per_step : 0.0;
  }
}

// The rotation mixes each pair's variances by cos^2 and sin^2; the float
// rotation rounds cos and sin to float and two products and a sum: 3u of
// each output's two terms; a float angle's error moves the output by at most
// that error times the rotation's derivative.
void rope_var(double* head, double* var, const RopeAngles& angles, int dim, double single) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double c = angles.cos[sz(i)], s = angles.sin[sz(i)];
    const double x1 = head[i], x2 = head[i + half], v1 = var[i], v2 = var[i + half];
    const double ac = std::abs(c), as = std::abs(s), d = angles.error[sz(i)];
    // d/dangle of (x1 c - x2 s) is -(x1 s + x2 c); of (x2 c + x1 s), x1 c - x2 s.
    const double r = 3 * single;
    var[i] = c * c * v1 + s * s * v2 + sq(r * (std::abs(x1) * ac + std::abs(x2) * as)) +
             sq(d * (std::abs(x1) * as + std::abs(x2) * ac));
    var[i + half] = c * c * v2 + s * s * v1 + sq(r * (std::abs(x2) * ac + std::abs(x1) * as)) +
                    sq(d * (std::abs(x2) * as + std::abs(x1) * ac));
  }
  oracle::rotate_half(std::span<double>(head, sz(dim)), angles.cos, angles.sin);
}

MlpScratch::MlpScratch(int E, int F)
    : h(sz(E)),
      var_h(sz(E)),
      up(sz(F)),
      var_up(sz(F)),
      gate(sz(F)),
      var_gate(sz(F)),
      proj(sz(E)),
      var_proj(sz(E)) {}

namespace {

// GELU in place: the input variance through gelu'^2; rounding of inner =
// (x^3 k + x) c: 3 roundings on the x term (add, product, float c) and 7 on
// the cubic (three products, float k, add, product, float c); tanh's ulp
// error plus (1 - t^2) times inner's; then (t + 1) x / 2 rounds twice. All
// kept at their worst.   up, var_up: [F].
void gelu_var(std::vector<double>& up, std::vector<double>& var_up, Rounding output) {
  const double c = std::sqrt(2.0 / std::numbers::pi), kc = 0.044715;
  for (size_t i = 0; i < up.size(); ++i) {
    const double z = up[i], az = std::abs(z);
    const double th = std::tanh(c * (z + kc * z * z * z));
    const double sech2 = 1 - th * th;
    const double derivative = 0.5 * (1 + th) + 0.5 * z * sech2 * c * (1 + 3 * kc * z * z);
    const double dt = sech2 * (3 * u * c * az + 7 * u * c * kc * az * az * az) +
                      kTanhRelativeError * std::abs(th);
    const double y = oracle::gelu_tanh(z);
    const double rounding = az / 2 * (dt + u * std::abs(1 + th)) + u * std::abs(y);
    up[i] = y;
    var_up[i] = sq(derivative) * var_up[i] + sq(rounding) + sq(output.of(y));
  }
}

// silu(g) up into up: variances through silu'(g) up and silu(g); rounding:
// exp(-g)'s ulp error enters g / (1 + e) scaled by e / (1 + e), then add,
// divide, multiply: 3u, all at their worst.   gate, var_gate, up, var_up: [F].
void swiglu_var(const std::vector<double>& gate, const std::vector<double>& var_gate,
                std::vector<double>& up, std::vector<double>& var_up, Rounding output) {
  for (size_t i = 0; i < up.size(); ++i) {
    const double g = gate[i];
    const double e = std::exp(-g);
    const double sigma = 1 / (1 + e);
    const double silu = oracle::silu(g);
    const double derivative = sigma * (1 + g * (1 - sigma));
    const double y = silu * up[i];
    const double rounding = std::abs(y) * (kExpRelativeError * e * sigma + 3 * u);
    // Narrower activations round silu's output and the product: 2 roundings.
    var_up[i] = sq(derivative * up[i]) * var_gate[i] + sq(silu) * var_up[i] + sq(rounding) +
                2 * sq(output.of(y));
    up[i] = y;
  }
}

}  // namespace

void mlp_var(bool gpt2, const LayerWeights& w, int E, int F, double eps, double* xt, double* vxt,
             MlpScratch& b, const ArithmeticModel& m) {
  norm_var(gpt2, xt, vxt, w.mlp_norm, w.mlp_norm_bias, E, eps, b.h.data(), b.var_h.data(), m);
  if (gpt2) {
    linear_var(w.w_up, w.b_up, b.h.data(), b.var_h.data(), E, F, b.up.data(), b.var_up.data(), m);
    gelu_var(b.up, b.var_up, m.output);
  } else {
    linear_var(w.w_gate, {}, b.h.data(), b.var_h.data(), E, F, b.gate.data(), b.var_gate.data(), m);
    linear_var(w.w_up, {}, b.h.data(), b.var_h.data(), E, F, b.up.data(), b.var_up.data(), m);
    swiglu_var(b.gate, b.var_gate, b.up, b.var_up, m.output);
  }
  linear_var(w.w_down, w.b_down, b.up.data(), b.var_up.data(), F, E, b.proj.data(),
             b.var_proj.data(), m);
  for (int e = 0; e < E; ++e) {
    xt[e] += b.proj[sz(e)];
    vxt[e] += b.var_proj[sz(e)] + sq(m.single * xt[e]);  // the residual add rounds once
  }
}

}  // namespace kvcheck::tolerance
