// A model's weights in device memory, laid out for the CUDA engine's
// kernels: one allocation, every tensor at a 256-byte boundary (so each is
// aligned for vector loads), Q, K and V fused into one matrix like the CPU's
// packed wqkv. Kept apart from the engine because the layout is fixed at load
// and the engine only reads it.
#pragma once

#include <vector>

#include "engine/cuda/device.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::cuda {

// Device pointers of one layer's weights inside DeviceWeights::buffer.
struct DeviceLayer {
  const float* attn_norm = nullptr;       // [E]
  const float* attn_norm_bias = nullptr;  // [E] or null (llama)
  const float* wqkv = nullptr;            // [H*D + 2*KVH*D][E]: q rows, k rows, v rows
  const float* bqkv = nullptr;            // [H*D + 2*KVH*D] or null
  const float* wo = nullptr;              // [E][H*D]
  const float* bo = nullptr;              // [E] or null
  const float* mlp_norm = nullptr;        // [E]
  const float* mlp_norm_bias = nullptr;   // [E] or null
  const float* w_up = nullptr;            // [F][E]
  const float* b_up = nullptr;            // [F] or null
  const float* w_gate = nullptr;          // [F][E] llama only
  const float* w_down = nullptr;          // [E][F]
  const float* b_down = nullptr;          // [E] or null
};

struct DeviceWeights {
  DeviceBuffer buffer;                     // every tensor below, 256-byte aligned
  const float* tok_embedding = nullptr;    // [V][E]
  const float* pos_embedding = nullptr;    // [max_pos][E] gpt2 only
  const float* final_norm = nullptr;       // [E]
  const float* final_norm_bias = nullptr;  // [E] gpt2 only
  const float* lm_head = nullptr;          // [V][E]
  std::vector<DeviceLayer> layers;         // [L]
};

// Uploads `weights` (already checked against `config`) with one copy.
void upload_weights(const Config& config, const Weights& weights, DeviceWeights& device);

}  // namespace kvcheck::cuda
