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

void rope_cos_sin(int position, double theta, std::span<double> cos, std::span<double> sin) {
  require(!cos.empty() && sin.size() == cos.size(), "rope_cos_sin: cos and sin are [D/2]");
  const double dim = 2.0 * static_cast<double>(cos.size());
  for (size_t i = 0; i < cos.size(); ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / dim);
    const double angle = static_cast<double>(position) * inv_freq;
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

void rotate_half(std::span<double> head, std::span<const double> cos, std::span<const double> sin) {
  require(!head.empty() && head.size() % 2 == 0, "rotate_half: head_dim is even");
  const size_t half = head.size() / 2;
  require(cos.size() == half && sin.size() == half, "rotate_half: cos and sin are [D/2]");
  for (size_t i = 0; i < half; ++i) {
    const double first = head[i], second = head[i + half];
    head[i] = first * cos[i] - second * sin[i];
    head[i + half] = second * cos[i] + first * sin[i];
  }
}

void apply_rope(std::span<double> head, int position, double theta) {
  require(!head.empty() && head.size() % 2 == 0, "apply_rope: head_dim is even");
  std::vector<double> cos(head.size() / 2), sin(head.size() / 2);  // [D/2] each
  rope_cos_sin(position, theta, cos, sin);
  rotate_half(head, cos, sin);
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

void attention_scores(std::span<const double> query, std::span<const double> keys, int n_kv_heads,
                      int kv_head, std::span<double> scores) {
  const size_t D = query.size(), KVH = static_cast<size_t>(n_kv_heads), N = scores.size();
  require(D > 0 && n_kv_heads > 0 && kv_head >= 0 && kv_head < n_kv_heads,
          "attention_scores: a KV head of a nonempty query");
  require(keys.size() == N * KVH * D, "attention_scores: keys are [N][KVH][D]");
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (size_t j = 0; j < N; ++j) {
    const double* key = &keys[(j * KVH + static_cast<size_t>(kv_head)) * D];  // [D]
    double dot = 0.0;
    for (size_t d = 0; d < D; ++d) dot += query[d] * key[d];
    scores[j] = dot * scale;
  }
}

void weighted_sum(std::span<const double> weights, std::span<const double> values, int n_kv_heads,
                  int kv_head, std::span<double> out) {
  const size_t D = out.size(), KVH = static_cast<size_t>(n_kv_heads), N = weights.size();
  require(D > 0 && n_kv_heads > 0 && kv_head >= 0 && kv_head < n_kv_heads,
          "weighted_sum: a KV head of a nonempty output");
  require(values.size() == N * KVH * D, "weighted_sum: values are [N][KVH][D]");
  std::fill(out.begin(), out.end(), 0.0);
  for (size_t j = 0; j < N; ++j) {
    const double* value = &values[(j * KVH + static_cast<size_t>(kv_head)) * D];  // [D]
    for (size_t d = 0; d < D; ++d) out[d] += weights[j] * value[d];
  }
}

void attend(std::span<const double> query, std::span<const double> keys,
            std::span<const double> values, int n_heads, int n_kv_heads, int head_dim,
            std::span<double> out) {
  require(n_heads > 0 && n_kv_heads > 0 && head_dim > 0, "attend: positive sizes");
  const size_t H = static_cast<size_t>(n_heads), D = static_cast<size_t>(head_dim);
  const size_t N = keys.size() / (static_cast<size_t>(n_kv_heads) * D);
  require(N > 0, "attend: at least one key");
  require(query.size() == H * D && out.size() == H * D, "attend: query and out are [H][D]");
  std::vector<double> scores(N), weights(N);  // [N] one query head at a time
  for (size_t h = 0; h < H; ++h) {
    const int kv = kv_head_of(static_cast<int>(h), n_heads, n_kv_heads);
    attention_scores(query.subspan(h * D, D), keys, n_kv_heads, kv, scores);
    softmax(scores, weights);
    weighted_sum(weights, values, n_kv_heads, kv, out.subspan(h * D, D));
  }
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
  const size_t row = KVH * D;  // one position of k or v
  for (size_t t = 0; t < T; ++t) {
    // Keys outside first..t are not looked at at all: the mask is the slice
    // passed (the window's t - W < j, then the causal j <= t).
    const size_t first = window > 0 && t + 1 > size_t(window) ? t + 1 - size_t(window) : 0;
    const size_t n = t + 1 - first;
    attend(q.subspan(t * H * D, H * D), k.subspan(first * row, n * row),
           v.subspan(first * row, n * row), n_heads, n_kv_heads, head_dim,
           out.subspan(t * H * D, H * D));
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
