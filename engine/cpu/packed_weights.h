// The weights as the CPU engine reads them: Q, K and V fused into one matrix
// so a layer's input is streamed once per step, the rest in the canonical
// [out][in] layout. Built once per engine.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::cpu {

struct PackedLayer {
  std::vector<float> attn_norm, attn_norm_bias;  // [E], bias empty for llama
  std::vector<float> wqkv;                       // [H*D + 2*KVH*D][E]: q rows, k rows, v rows
  std::vector<float> bqkv;                       // [H*D + 2*KVH*D] or empty
  std::vector<float> wo, bo;                     // [E][H*D], [E] or empty
  std::vector<float> mlp_norm, mlp_norm_bias;    // [E]
  std::vector<float> w_up, b_up;                 // [F][E], [F] or empty
  std::vector<float> w_gate;                     // [F][E] llama only
  std::vector<float> w_down, b_down;             // [E][F], [E] or empty
};

struct PackedWeights {
  std::vector<float> tok_embedding;                // [V][E]
  std::vector<float> pos_embedding;                // [max_pos][E] gpt2 only
  std::vector<PackedLayer> layers;                 // [L]
  std::vector<float> final_norm, final_norm_bias;  // [E]
  std::vector<float> lm_head;                      // [V][E]

  uint64_t bytes() const;
};

PackedWeights pack_weights(const Config& config, const Weights& weights);

// Where each tensor is read from, given its field in a layout Weights (the
// plugin ABI packs from buffers the caller owns, without copying them into a
// Weights first). A field the config does not use may read as empty.
using TensorSource = std::function<std::span<const float>(const std::vector<float>& field)>;
PackedWeights pack_weights(const Config& config, const Weights& layout, const TensorSource& read);

}  // namespace kvcheck::cpu
