#include "oracle/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace kvcheck::oracle {

namespace {

// The forward pass checks the model against its config before calling any op,
// so a failure here is a bug in the oracle or in a test that calls an op
// directly, never bad user input.
void require(bool condition, const char* what) {
  if (!condition) throw std::logic_error(std::string("oracle op precondition: ") + what);
}

size_t index(size_t row, size_t width, size_t column) {
  return row * width + column;
}

}  // namespace

void layer_norm(std::span<const double> x, std::span<const float> gain, std::span<const float> bias,
                double eps, std::span<double> out) {
  require(!x.empty() && gain.size() == x.size() && bias.size() == x.size(),
          "layer_norm: x, gain and bias have the same nonzero width");
  require(out.size() == x.size(), "layer_norm: out is [E]");
  const double n = static_cast<double>(x.size());
  double mean = 0.0;
  for (double value : x) mean += value;
  mean /= n;
  double variance = 0.0;  // biased: divided by n, as torch.nn.LayerNorm does
  for (double value : x) variance += (value - mean) * (value - mean);
  variance /= n;
  const double inv_std = 1.0 / std::sqrt(variance + eps);
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = (x[i] - mean) * inv_std * static_cast<double>(gain[i]) + static_cast<double>(bias[i]);
  }
}

std::vector<double> layer_norm(std::span<const double> x, std::span<const float> gain,
                               std::span<const float> bias, double eps) {
  std::vector<double> out(x.size());  // [E]
  layer_norm(x, gain, bias, eps, out);
  return out;
}

void rms_norm(std::span<const double> x, std::span<const float> gain, double eps,
              std::span<double> out) {
  require(!x.empty() && gain.size() == x.size(),
          "rms_norm: x and gain have the same nonzero width");
  require(out.size() == x.size(), "rms_norm: out is [E]");
  double mean_square = 0.0;
  for (double value : x) mean_square += value * value;
  mean_square /= static_cast<double>(x.size());
  const double inv_rms = 1.0 / std::sqrt(mean_square + eps);
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv_rms * static_cast<double>(gain[i]);
}

std::vector<double> rms_norm(std::span<const double> x, std::span<const float> gain, double eps) {
  std::vector<double> out(x.size());  // [E]
  rms_norm(x, gain, eps, out);
  return out;
}

void linear(std::span<const double> x, std::span<const float> weight, std::span<const float> bias,
            int out_features, std::span<double> out) {
  const size_t n_out = static_cast<size_t>(out_features);
  const size_t n_in = x.size();
  require(out_features > 0 && weight.size() == n_out * n_in, "linear: weight is [out][in]");
  require(bias.empty() || bias.size() == n_out, "linear: bias is [out] or absent");
  require(out.size() == n_out, "linear: out is [out]");
  for (size_t o = 0; o < n_out; ++o) {
    double sum = bias.empty() ? 0.0 : static_cast<double>(bias[o]);
    for (size_t i = 0; i < n_in; ++i) sum += static_cast<double>(weight[index(o, n_in, i)]) * x[i];
    out[o] = sum;
  }
}

std::vector<double> linear(std::span<const double> x, std::span<const float> weight,
                           std::span<const float> bias, int out_features) {
  std::vector<double> out(out_features > 0 ? static_cast<size_t>(out_features) : 0);  // [out]
  linear(x, weight, bias, out_features, out);
  return out;
}

double gelu_tanh(double x) {
  const double sqrt_2_over_pi = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

void apply_rope(std::span<double> head, int position, double theta) {
  require(!head.empty() && head.size() % 2 == 0, "apply_rope: head_dim is even");
  const size_t half = head.size() / 2;
  const double dim = static_cast<double>(head.size());
  for (size_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / dim);
    const double angle = static_cast<double>(position) * inv_freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double first = head[i], second = head[i + half];
    head[i] = first * c - second * s;
    head[i + half] = second * c + first * s;
  }
}

int kv_head_of(int query_head, int n_heads, int n_kv_heads) {
  require(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "kv_head_of: n_kv_heads divides n_heads");
  require(query_head >= 0 && query_head < n_heads, "kv_head_of: query head in [0, n_heads)");
  const int group = n_heads / n_kv_heads;
  return query_head / group;
}

void softmax(std::span<const double> scores, std::span<double> out) {
  require(!scores.empty(), "softmax: at least one score");
  require(out.size() == scores.size(), "softmax: out is [N]");
  // Subtracting the max keeps exp() finite; it cancels in the ratio.
  double max_score = scores[0];
  for (double s : scores) max_score = std::max(max_score, s);
  double total = 0.0;
  for (size_t j = 0; j < scores.size(); ++j) {
    out[j] = std::exp(scores[j] - max_score);
    total += out[j];
  }
  for (double& w : out) w /= total;
}

std::vector<double> softmax(std::span<const double> scores) {
  std::vector<double> weights(scores.size());  // [N]
  softmax(scores, weights);
  return weights;
}

void causal_attention(std::span<const double> q, std::span<const double> k,
                      std::span<const double> v, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, std::span<double> out, int window) {
  const size_t T = static_cast<size_t>(n_tokens), H = static_cast<size_t>(n_heads),
               KVH = static_cast<size_t>(n_kv_heads), D = static_cast<size_t>(head_dim);
  require(n_tokens >= 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0,
          "causal_attention: positive sizes");
  require(q.size() == T * H * D, "causal_attention: q is [T][H][D]");
  require(k.size() == T * KVH * D && v.size() == T * KVH * D,
          "causal_attention: k and v are [T][KVH][D]");
  require(out.size() == T * H * D, "causal_attention: out is [T][H][D]");
  require(window >= 0, "causal_attention: window >= 0");
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::fill(out.begin(), out.end(), 0.0);
  // Room for the longest row of scores; row t uses its first t+1 entries.
  std::vector<double> score_buffer(T), weight_buffer(T);  // [T]
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h) {
      const size_t kv = static_cast<size_t>(kv_head_of(static_cast<int>(h), n_heads, n_kv_heads));
      const double* query = &q[(t * H + h) * D];  // [D]
      // Keys outside first..t are not looked at at all: the mask is the loop
      // bounds (the window's t - W < j, then the causal j <= t).
      const size_t first = window > 0 && t + 1 > size_t(window) ? t + 1 - size_t(window) : 0;
      const size_t n = t + 1 - first;
      const std::span<double> scores = std::span<double>(score_buffer).first(n);  // [n]
      for (size_t j = first; j <= t; ++j) {
        const double* key = &k[(j * KVH + kv) * D];  // [D]
        double dot = 0.0;
        for (size_t d = 0; d < D; ++d) dot += query[d] * key[d];
        scores[j - first] = dot * scale;
      }
      const std::span<double> weights = std::span<double>(weight_buffer).first(n);  // [n]
      softmax(scores, weights);
      double* result = &out[(t * H + h) * D];  // [D]
      for (size_t j = first; j <= t; ++j) {
        const double* value = &v[(j * KVH + kv) * D];  // [D]
        for (size_t d = 0; d < D; ++d) result[d] += weights[j - first] * value[d];
      }
    }
  }
}

std::vector<double> causal_attention(std::span<const double> q, std::span<const double> k,
                                     std::span<const double> v, int n_tokens, int n_heads,
                                     int n_kv_heads, int head_dim, int window) {
  std::vector<double> out(q.size());  // [T][H][D]
  causal_attention(q, k, v, n_tokens, n_heads, n_kv_heads, head_dim, out, window);
  return out;
}

}  // namespace kvcheck::oracle
