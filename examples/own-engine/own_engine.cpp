#include "own_engine.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace own {

namespace {

std::vector<float> copy(const TensorLookup& tensors, const std::string& name, size_t elements) {
  const float* data = tensors(name, elements);
  return std::vector<float>(data, data + elements);
}

// y[out] = w[out][in] * x[in], each sum in index order.
void linear(const std::vector<float>& w, const float* x, int in, int out, float* y) {
  for (int o = 0; o < out; ++o) {
    float sum = 0.0f;
    for (int i = 0; i < in; ++i) sum += w[size_t(o) * in + i] * x[i];
    y[o] = sum;
  }
}

void rms_norm(const float* x, const std::vector<float>& gain, int n, double eps, float* y) {
  float squares = 0.0f;
  for (int i = 0; i < n; ++i) squares += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(squares / float(n) + float(eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * gain[size_t(i)];
}

// Rotate-half RoPE; the angle in double, as kvcheck's oracle computes it.
void rope(float* head, int head_dim, int position, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = double(position) * std::pow(theta, -2.0 * double(i) / double(head_dim));
    const float c = float(std::cos(angle)), s = float(std::sin(angle));
    const float a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

}  // namespace

Options parse_options(const std::string& text) {
  Options options;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('&', begin);
    if (end == std::string::npos) end = text.size();
    const std::string pair = text.substr(begin, end - begin);
    begin = end + 1;
    if (pair == "bug=restart_positions") {
      options.restart_positions = true;
    } else if (pair.rfind("bug=", 0) == 0) {
      throw Error(ErrorCode::kInput, "own-engine: option bug=" + pair.substr(4) +
                                         " is unknown (the only bug is restart_positions)");
    } else {
      throw Error(ErrorCode::kInput,
                  "own-engine: unknown option \"" + pair + "\" (known: bug=restart_positions)");
    }
  }
  return options;
}

Engine::Engine(const Shape& shape, const TensorLookup& tensors, int capacity, int max_rows,
               Options options)
    : shape_(shape), capacity_(capacity), max_rows_(max_rows), options_(options) {
  if (capacity < 1 || capacity > kMaxCapacity || max_rows < 1 || max_rows > kMaxRows) {
    throw Error(ErrorCode::kInput, "own-engine: capacity " + std::to_string(capacity) +
                                       " or max_rows " + std::to_string(max_rows) +
                                       " outside [1, 65536] / [1, 256]");
  }
  if (shape.head_dim % 2 != 0 || shape.n_kv_heads < 1 || shape.n_heads % shape.n_kv_heads != 0) {
    throw Error(ErrorCode::kInput,
                "own-engine: head_dim must be even and n_kv_heads divide n_heads");
  }
  const size_t E = size_t(shape.d_model), F = size_t(shape.d_ff), V = size_t(shape.vocab);
  const size_t Q = size_t(shape.n_heads) * shape.head_dim;
  const size_t KV = size_t(shape.n_kv_heads) * shape.head_dim;
  embedding_ = copy(tensors, "tok_embedding", V * E);
  for (int l = 0; l < shape.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layers_.push_back({copy(tensors, p + "attn_norm", E), copy(tensors, p + "wq", Q * E),
                       copy(tensors, p + "wk", KV * E), copy(tensors, p + "wv", KV * E),
                       copy(tensors, p + "wo", E * Q), copy(tensors, p + "mlp_norm", E),
                       copy(tensors, p + "w_gate", F * E), copy(tensors, p + "w_up", F * E),
                       copy(tensors, p + "w_down", E * F)});
  }
  final_norm_ = copy(tensors, "final_norm", E);
  lm_head_ = copy(tensors, "lm_head", V * E);
}

int64_t Engine::start() {
  if (int(sequences_.size()) >= max_rows_) {
    throw Error(ErrorCode::kRows, "start: all " + std::to_string(max_rows_) + " rows are taken");
  }
  Sequence& s = sequences_[next_id_];
  s.k.resize(size_t(shape_.n_layers));
  s.v.resize(size_t(shape_.n_layers));
  return next_id_++;
}

const Engine::Sequence& Engine::lookup(int64_t sequence, const char* call) const {
  const auto it = sequences_.find(sequence);
  if (it == sequences_.end()) {
    throw Error(ErrorCode::kUnknownSequence,
                std::string(call) + ": sequence " + std::to_string(sequence) + " is not running");
  }
  return it->second;
}

// The whole batch is checked before anything changes.
void Engine::check(const std::vector<Chunk>& batch) const {
  std::set<int64_t> seen;
  for (const Chunk& c : batch) {
    const Sequence& s = lookup(c.sequence, "step");
    const std::string who = "step: sequence " + std::to_string(c.sequence);
    if (!seen.insert(c.sequence).second) throw Error(ErrorCode::kBadBatch, who + " appears twice");
    if (c.n < 1) throw Error(ErrorCode::kBadBatch, who + ": empty chunk");
    for (int i = 0; i < c.n; ++i) {
      if (c.tokens[i] < 0 || c.tokens[i] >= shape_.vocab) {
        throw Error(ErrorCode::kBadToken,
                    who + ": token " + std::to_string(c.tokens[i]) + " outside the vocabulary");
      }
    }
    if (s.length + c.n > capacity_) {
      throw Error(ErrorCode::kCapacity, who + ": " + std::to_string(s.length + c.n) +
                                            " tokens exceed the capacity " +
                                            std::to_string(capacity_));
    }
  }
}

void Engine::step(const std::vector<Chunk>& batch, float* logits) {
  check(batch);
  for (const Chunk& c : batch) {
    Sequence& s = sequences_.at(c.sequence);
    const bool decode = c.n == 1 && s.length > 0;
    for (int i = 0; i < c.n; ++i) {
      // The seeded bug counts decode positions from 0 instead of the length.
      const int position = options_.restart_positions && decode ? s.decoded : s.length;
      forward(s, c.tokens[i], position, logits);
      logits += shape_.vocab;
    }
    if (decode) ++s.decoded;
  }
}

void Engine::finish(int64_t sequence) {
  lookup(sequence, "finish");
  sequences_.erase(sequence);
  saved_.erase(sequence);
}

void Engine::reset() {
  sequences_.clear();
  saved_.clear();
}

void Engine::save(int64_t sequence) {
  saved_[sequence] = lookup(sequence, "save");
}

void Engine::restore(int64_t sequence) {
  lookup(sequence, "restore");
  const auto it = saved_.find(sequence);
  if (it == saved_.end()) {
    throw Error(ErrorCode::kBadBatch,
                "restore: sequence " + std::to_string(sequence) + " was never saved");
  }
  sequences_.at(sequence) = it->second;
}

int Engine::length(int64_t sequence) const {
  return lookup(sequence, "length").length;
}

const std::vector<float>& Engine::keys(int64_t sequence, int layer) const {
  if (layer < 0 || layer >= shape_.n_layers) throw Error(ErrorCode::kBadBatch, "cache: bad layer");
  return lookup(sequence, "cache").k[size_t(layer)];
}

const std::vector<float>& Engine::values(int64_t sequence, int layer) const {
  if (layer < 0 || layer >= shape_.n_layers) throw Error(ErrorCode::kBadBatch, "cache: bad layer");
  return lookup(sequence, "cache").v[size_t(layer)];
}

// Causal attention of one token's queries over the sequence's cache, which
// already holds this token's K and V. out is [H*D].
void Engine::attend(const Sequence& s, int layer, const float* q, float* out) const {
  const int D = shape_.head_dim, KVH = shape_.n_kv_heads, n = s.length + 1;
  const int group = shape_.n_heads / KVH;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<float>& k = s.k[size_t(layer)];
  const std::vector<float>& v = s.v[size_t(layer)];
  std::vector<float> weights(static_cast<size_t>(n));  // [n]
  for (int h = 0; h < shape_.n_heads; ++h) {
    const int g = h / group;  // repeat_interleave: query head h reads KV head h / group
    float top = -INFINITY;
    for (int j = 0; j < n; ++j) {
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q[h * D + d] * k[(size_t(j) * KVH + g) * D + d];
      weights[size_t(j)] = dot * scale;
      top = std::max(top, weights[size_t(j)]);
    }
    float total = 0.0f;
    for (float& w : weights) total += (w = std::exp(w - top));
    for (int d = 0; d < D; ++d) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += weights[size_t(j)] * v[(size_t(j) * KVH + g) * D + d];
      out[h * D + d] = sum / total;
    }
  }
}

// One token through every layer; appends its K and V, writes its [V] logits.
void Engine::forward(Sequence& s, int32_t token, int position, float* logits) {
  const int E = shape_.d_model, F = shape_.d_ff, D = shape_.head_dim;
  const int Q = shape_.n_heads * D, KV = shape_.n_kv_heads * D;
  std::vector<float> x(embedding_.begin() + size_t(token) * E,
                       embedding_.begin() + size_t(token + 1) * E);  // [E]
  const auto buffer = [](int n) { return std::vector<float>(static_cast<size_t>(n)); };
  std::vector<float> h = buffer(E), q = buffer(Q), att = buffer(Q);        // [E], [H*D], [H*D]
  std::vector<float> k = buffer(KV), v = buffer(KV);                       // [KVH*D] each
  std::vector<float> gate = buffer(F), up = buffer(F), delta = buffer(E);  // [F], [F], [E]
  for (int l = 0; l < shape_.n_layers; ++l) {
    const Layer& w = layers_[size_t(l)];
    rms_norm(x.data(), w.attn_norm, E, shape_.norm_eps, h.data());
    linear(w.wq, h.data(), E, Q, q.data());
    linear(w.wk, h.data(), E, KV, k.data());
    linear(w.wv, h.data(), E, KV, v.data());
    for (int i = 0; i < shape_.n_heads; ++i)
      rope(&q[size_t(i) * D], D, position, shape_.rope_theta);
    for (int i = 0; i < shape_.n_kv_heads; ++i)
      rope(&k[size_t(i) * D], D, position, shape_.rope_theta);
    s.k[size_t(l)].insert(s.k[size_t(l)].end(), k.begin(), k.end());
    s.v[size_t(l)].insert(s.v[size_t(l)].end(), v.begin(), v.end());
    attend(s, l, q.data(), att.data());
    linear(w.wo, att.data(), Q, E, delta.data());
    for (int e = 0; e < E; ++e) x[size_t(e)] += delta[size_t(e)];
    rms_norm(x.data(), w.mlp_norm, E, shape_.norm_eps, h.data());
    linear(w.w_gate, h.data(), E, F, gate.data());
    linear(w.w_up, h.data(), E, F, up.data());
    for (int f = 0; f < F; ++f)
      gate[size_t(f)] = gate[size_t(f)] / (1.0f + std::exp(-gate[size_t(f)])) * up[size_t(f)];
    linear(w.w_down, gate.data(), F, E, delta.data());
    for (int e = 0; e < E; ++e) x[size_t(e)] += delta[size_t(e)];
  }
  ++s.length;
  rms_norm(x.data(), final_norm_, E, shape_.norm_eps, h.data());
  linear(lm_head_, h.data(), E, shape_.vocab, logits);
}

}  // namespace own
