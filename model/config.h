// The model's definition, shared by the engine and the oracle. Data only: no
// arithmetic that a bug could share between the two lives here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/status.h"

namespace kvcheck {

enum class Family { kGpt2, kLlama };

const char* family_name(Family f);
Result<Family> parse_family(const std::string& name);

struct Config {
  Family family = Family::kGpt2;
  int n_layers = 2;
  int d_model = 32;             // residual width E
  int n_heads = 4;              // query heads H
  int n_kv_heads = 4;           // KV heads; divides n_heads (MHA: H, MQA: 1, GQA: between)
  int head_dim = 8;             // D; q width is H*D, which need not equal E
  int d_ff = 128;               // MLP hidden width F
  int vocab = 64;               // V
  int max_pos = 256;            // positions the model accepts (wpe rows for gpt2)
  double rope_theta = 10000.0;  // llama only
  double norm_eps = 1e-5;
  bool qkv_bias = false;  // gpt2 only
  // Sliding-window attention (docs/OPERATIONS.md, "Sliding windows"): 0 = none;
  // W > 0: a windowed layer's token at position p attends to positions q with
  // p - W < q <= p. sliding_window_pattern N picks the windowed layers as
  // Hugging Face's Gemma does: 0 or 1, every layer; N >= 2, layer l is global
  // when (l + 1) % N == 0 and windowed otherwise.
  int sliding_window = 0;
  int sliding_window_pattern = 0;

  // Query heads that read one KV head: query head h reads KV head h / group()
  // (repeat_interleave), never h % n_kv_heads.
  int group() const { return n_heads / n_kv_heads; }
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
  bool windowed(int layer) const {
    return sliding_window > 0 &&
           (sliding_window_pattern <= 1 || (layer + 1) % sliding_window_pattern != 0);
  }
  // Positions a layer keeps per sequence under `capacity`: the window for a
  // windowed layer (a ring), all of them for a global one.
  int layer_slots(int layer, int capacity) const {
    return windowed(layer) && sliding_window < capacity ? sliding_window : capacity;
  }

  // Empty when consistent; otherwise one message naming the field and value.
  std::string validate() const;

  // Total float parameters; only meaningful for a config that validates.
  uint64_t parameter_count() const;

  bool operator==(const Config&) const = default;
};

// Sensible small configs of each family, used by demos and tests.
Config gpt2_tiny();
Config llama_tiny();

// KV cache bytes: 2 (K and V) * layers * rows * capacity * kv_heads * head_dim * dtype.
uint64_t kv_cache_bytes(int n_layers, int rows, int capacity, int n_kv_heads, int head_dim,
                        int dtype_bytes);

}  // namespace kvcheck
