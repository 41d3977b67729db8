// Model parameters in one canonical in-memory layout. Every matrix is stored
// row-major as [out][in] (the Hugging Face nn.Linear layout), whatever the
// file format; safetensors IO converts gpt2's Conv1D [in][out] at the boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace kvcheck {

struct LayerWeights {
  std::vector<float> attn_norm;       // [E] pre-attention norm gain
  std::vector<float> attn_norm_bias;  // [E] gpt2 only
  std::vector<float> wq;              // [H*D][E]
  std::vector<float> wk;              // [KVH*D][E]
  std::vector<float> wv;              // [KVH*D][E]
  std::vector<float> bq;              // [H*D]   when qkv_bias
  std::vector<float> bk;              // [KVH*D] when qkv_bias
  std::vector<float> bv;              // [KVH*D] when qkv_bias
  std::vector<float> wo;              // [E][H*D]
  std::vector<float> bo;              // [E] gpt2 only
  std::vector<float> mlp_norm;        // [E] pre-MLP norm gain
  std::vector<float> mlp_norm_bias;   // [E] gpt2 only
  std::vector<float> w_up;            // [F][E] gpt2 c_fc, llama up_proj
  std::vector<float> b_up;            // [F] gpt2 only
  std::vector<float> w_gate;          // [F][E] llama only
  std::vector<float> w_down;          // [E][F] gpt2 mlp.c_proj, llama down_proj
  std::vector<float> b_down;          // [E] gpt2 only

  bool operator==(const LayerWeights&) const = default;
};

struct Weights {
  std::vector<float> tok_embedding;    // [V][E]
  std::vector<float> pos_embedding;    // [max_pos][E] gpt2 only
  std::vector<LayerWeights> layers;    // [L]
  std::vector<float> final_norm;       // [E]
  std::vector<float> final_norm_bias;  // [E] gpt2 only
  std::vector<float> lm_head;          // [V][E], untied from tok_embedding

  bool operator==(const Weights&) const = default;
};

// How a tensor is initialised from the seed; see docs/WEIGHTS.md.
enum class InitKind { kEmbedding, kLinear, kNormGain, kBias };

// One entry of the tensor table: the canonical name, the shape, and the
// storage. The table is the single list of what a config's model contains;
// initialisation, safetensors IO and shape checks all walk it.
struct TensorRef {
  std::string name;            // canonical, e.g. "layers.3.wk"
  std::vector<int64_t> shape;  // row-major, as stored in data
  InitKind init;
  int fan_in;  // inner dimension for kLinear, else 0
  std::vector<float>* data;
};

// Walks every tensor the config requires, in a fixed order. The Weights'
// vectors are resized to their shapes first (layers included).
std::vector<TensorRef> tensor_table(const Config& config, Weights& weights);

// The same table, read-only and in the same order, for writers and for
// checking a file against a config before anything is allocated: nothing is
// resized, and `data` points at whatever the vector holds now (check_shapes
// says whether that matches `shape`). Tensors of layers beyond
// weights.layers.size() are left out, so a Weights holding only
// config.n_layers empty layers lists every name and shape for free.
struct TensorView {
  std::string name;            // canonical, as in TensorRef
  std::vector<int64_t> shape;  // row-major, as stored in data
  const std::vector<float>* data;
};
std::vector<TensorView> tensor_views(const Config& config, const Weights& weights);

// The same walk without building the list: `visit` gets each tensor's name,
// shape and storage, the name and shape valid during the call only, and
// nothing is allocated per tensor. For callers that describe a model once per
// engine they create (the plugin shim): a fresh list each time was most of
// what the plugin path added to creating an engine.
using TensorVisitor = std::function<void(std::string_view name, std::span<const int64_t> shape,
                                         const std::vector<float>& data)>;
void for_each_tensor(const Config& config, const Weights& weights, const TensorVisitor& visit);

// Deterministic weights from a 64-bit seed: the same bits on every machine.
// Each tensor draws from its own splitmix64 stream keyed by seed and name.
Weights init_weights(const Config& config, uint64_t seed);

// Empty when every tensor has the size its shape implies; otherwise a message
// naming the tensor.
std::string check_shapes(const Config& config, const Weights& weights);

}  // namespace kvcheck
