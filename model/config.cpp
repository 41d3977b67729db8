#include "model/config.h"

#include <cmath>
#include <sstream>

namespace kvcheck {

const char* family_name(Family f) {
  return f == Family::kGpt2 ? "gpt2" : "llama";
}

Result<Family> parse_family(const std::string& name) {
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  return Result<Family>::failure("family: expected \"gpt2\" or \"llama\", got \"" + name + "\"");
}

namespace {

// Upper bounds keep every size product inside 64 bits and inside what a test
// machine can allocate; they are far above any model kvcheck is meant for.
constexpr int kMaxLayers = 256;
constexpr int kMaxWidth = 1 << 16;
constexpr int kMaxVocab = 1 << 20;
constexpr int kMaxPositions = 1 << 20;
constexpr uint64_t kMaxParameters = uint64_t{1} << 34;  // 64 GiB of f32

std::string out_of_range(const char* field, long long value, long long lo, long long hi) {
  std::ostringstream out;
  out << field << ": " << value << " is out of range [" << lo << ", " << hi << "]";
  return out.str();
}

}  // namespace

std::string Config::validate() const {
  struct Bound {
    const char* field;
    int value;
    int hi;
  };
  const Bound bounds[] = {{"n_layers", n_layers, kMaxLayers}, {"d_model", d_model, kMaxWidth},
                          {"n_heads", n_heads, 1024},         {"n_kv_heads", n_kv_heads, 1024},
                          {"head_dim", head_dim, 4096},       {"d_ff", d_ff, 4 * kMaxWidth},
                          {"vocab", vocab, kMaxVocab},        {"max_pos", max_pos, kMaxPositions}};
  for (const Bound& b : bounds) {
    if (b.value < 1 || b.value > b.hi) return out_of_range(b.field, b.value, 1, b.hi);
  }
  if (sliding_window < 0 || sliding_window > kMaxPositions) {
    return out_of_range("sliding_window", sliding_window, 0, kMaxPositions);
  }
  if (sliding_window_pattern < 0 || sliding_window_pattern > kMaxLayers) {
    return out_of_range("sliding_window_pattern", sliding_window_pattern, 0, kMaxLayers);
  }
  // A pattern picks the windowed layers; without a window it would be a second
  // spelling of "no window", which files and JSON could not round-trip.
  if (sliding_window == 0 && sliding_window_pattern != 0) {
    return "sliding_window_pattern: " + std::to_string(sliding_window_pattern) +
           " needs a sliding_window > 0 (without a window the pattern must be 0)";
  }
  std::ostringstream out;
  if (n_heads % n_kv_heads != 0) {
    out << "n_kv_heads: " << n_kv_heads << " does not divide n_heads " << n_heads;
    return out.str();
  }
  if (q_width() > kMaxWidth) {
    out << "n_heads*head_dim: " << q_width() << " exceeds " << kMaxWidth;
    return out.str();
  }
  if (!(norm_eps > 0.0) || !std::isfinite(norm_eps) || norm_eps > 1.0) {
    out << "norm_eps: " << norm_eps << " must be finite and in (0, 1]";
    return out.str();
  }
  if (family == Family::kLlama) {
    if (head_dim % 2 != 0) {
      out << "head_dim: " << head_dim << " must be even under RoPE (llama family)";
      return out.str();
    }
    if (!(rope_theta > 1.0) || !std::isfinite(rope_theta)) {
      out << "rope_theta: " << rope_theta << " must be finite and > 1";
      return out.str();
    }
    if (qkv_bias) return "qkv_bias: true is not part of the llama family (it has no biases)";
  }
  if (parameter_count() > kMaxParameters) {
    out << "parameter count: " << parameter_count() << " exceeds " << kMaxParameters;
    return out.str();
  }
  return {};
}

uint64_t Config::parameter_count() const {
  const uint64_t E = d_model, F = d_ff, V = vocab, Q = q_width(), KV = kv_width();
  const bool gpt2 = family == Family::kGpt2;
  uint64_t layer = 2 * E                         // two norm gains
                   + Q * E + 2 * KV * E + E * Q  // q, k, v, o
                   + (gpt2 ? 2 * F * E : 3 * F * E);
  if (gpt2) layer += 2 * E + E + F + E;  // norm biases, o bias, fc and proj biases
  if (qkv_bias) layer += Q + 2 * KV;
  uint64_t total = uint64_t(n_layers) * layer + 2 * V * E + E;  // embeddings, head, final norm
  if (gpt2) total += uint64_t(max_pos) * E + E;                 // wpe, final norm bias
  return total;
}

Config gpt2_tiny() {
  Config c;
  c.family = Family::kGpt2;
  c.qkv_bias = true;
  return c;
}

Config llama_tiny() {
  Config c;
  c.family = Family::kLlama;
  c.n_kv_heads = 2;
  c.d_ff = 96;
  c.norm_eps = 1e-6;
  return c;
}

uint64_t kv_cache_bytes(int n_layers, int rows, int capacity, int n_kv_heads, int head_dim,
                        int dtype_bytes) {
  return uint64_t{2} * uint64_t(n_layers) * uint64_t(rows) * uint64_t(capacity) *
         uint64_t(n_kv_heads) * uint64_t(head_dim) * uint64_t(dtype_bytes);
}

}  // namespace kvcheck
