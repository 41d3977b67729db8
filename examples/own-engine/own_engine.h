// A small llama-family engine with a per-layer KV cache, written for this
// example and independent of kvcheck: plain scalar float loops, one token at
// a time. kvcheck checks it through two front ends over this same code:
// kvcheck_front.cpp (a kvcheck::Engine for the conformance test) and
// plugin.cpp (the C ABI of kvcheck/engine_plugin.h for --backend plugin:).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace own {

// The same codes as the C ABI's KVCHECK_ERR_*, so plugin.cpp passes them on.
enum class ErrorCode : int32_t {
  kCapacity = 1,
  kRows = 2,
  kUnknownSequence = 3,
  kBadBatch = 4,
  kBadToken = 5,
  kInput = 7,
};

// A refused call; the engine is unchanged when one is thrown.
struct Error : std::runtime_error {
  Error(ErrorCode c, const std::string& message) : std::runtime_error(message), code(c) {}
  ErrorCode code;
};

// The llama model's sizes (docs/ORACLE.md in kvcheck).
struct Shape {
  int n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0, vocab = 0;
  double rope_theta = 10000.0, norm_eps = 1e-5;
};

// What the backend string's options select.
struct Options {
  bool restart_positions = false;  // seeded bug: decode positions restart at 0
};
// "bug=restart_positions&..." -> Options; throws Error(kInput) naming an
// unknown key or value.
Options parse_options(const std::string& text);

// Real limits, declared in own_traits.h and refused at creation.
constexpr int kMaxRows = 256;
constexpr int kMaxCapacity = 65536;

// name, elements -> the tensor's row-major f32 data; throws Error(kInput)
// when it is missing or has another size.
using TensorLookup = std::function<const float*(const std::string& name, size_t elements)>;

struct Chunk {
  int64_t sequence;
  const int32_t* tokens;  // [n]
  int n;
};

class Engine {
 public:
  Engine(const Shape& shape, const TensorLookup& tensors, int capacity, int max_rows,
         Options options);

  int64_t start();
  // Feeds every chunk in order; logits is [sum of n][vocab].
  void step(const std::vector<Chunk>& batch, float* logits);
  void finish(int64_t sequence);
  void reset();
  // Keeps a copy of the sequence's cache, replacing the one kept before;
  // restore returns the sequence to it (Error(kBadBatch) for a sequence
  // never saved). A finish or reset drops the copy.
  void save(int64_t sequence);
  void restore(int64_t sequence);
  int length(int64_t sequence) const;
  // One layer's cache of a sequence, [length][n_kv_heads][head_dim] each.
  const std::vector<float>& keys(int64_t sequence, int layer) const;
  const std::vector<float>& values(int64_t sequence, int layer) const;
  const Shape& shape() const { return shape_; }

 private:
  struct Layer {
    std::vector<float> attn_norm;  // [E]
    std::vector<float> wq;         // [H*D][E]
    std::vector<float> wk, wv;     // [KVH*D][E]
    std::vector<float> wo;         // [E][H*D]
    std::vector<float> mlp_norm;   // [E]
    std::vector<float> w_gate;     // [F][E]
    std::vector<float> w_up;       // [F][E]
    std::vector<float> w_down;     // [E][F]
  };
  struct Sequence {
    std::vector<std::vector<float>> k, v;  // [L] of [length][KVH][D]
    int length = 0;
    int decoded = 0;  // decode tokens fed (the seeded bug's positions)
  };

  const Sequence& lookup(int64_t sequence, const char* call) const;
  void check(const std::vector<Chunk>& batch) const;
  void forward(Sequence& s, int32_t token, int position, float* logits);
  void attend(const Sequence& s, int layer, const float* q, float* out) const;

  Shape shape_;
  int capacity_, max_rows_;
  Options options_;
  std::vector<float> embedding_;   // [V][E]
  std::vector<Layer> layers_;      // [L]
  std::vector<float> final_norm_;  // [E]
  std::vector<float> lm_head_;     // [V][E]
  std::map<int64_t, Sequence> sequences_;
  std::map<int64_t, Sequence> saved_;  // each sequence's last save
  int64_t next_id_ = 0;
};

}  // namespace own
