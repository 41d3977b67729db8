#include "model/kv_presets.h"

namespace kvcheck {

const std::vector<KvShape>& kv_presets() {
  // name, layers, hidden, heads, kv heads, head_dim, max context, window.
  static const std::vector<KvShape> presets = {
      // openai-community/gpt2: n_layer 12, n_embd 768, n_head 12, n_positions 1024.
      {"gpt2", 12, 768, 12, 12, 64, 1024, 0},
      // meta-llama/Meta-Llama-3-8B: max_position_embeddings 8192.
      {"llama-3-8b", 32, 4096, 32, 8, 128, 8192, 0},
      // meta-llama/Meta-Llama-3-70B.
      {"llama-3-70b", 80, 8192, 64, 8, 128, 8192, 0},
      // mistralai/Mistral-7B-v0.1: sliding_window 4096 (later versions dropped it).
      {"mistral-7b", 32, 4096, 32, 8, 128, 32768, 4096},
      // Qwen/Qwen2.5-7B: sliding_window is set but use_sliding_window is false.
      {"qwen2.5-7b", 28, 3584, 28, 4, 128, 131072, 0},
  };
  return presets;
}

std::optional<KvShape> find_kv_preset(std::string_view name) {
  for (const KvShape& shape : kv_presets()) {
    if (shape.name == name) return shape;
  }
  return std::nullopt;
}

}  // namespace kvcheck
