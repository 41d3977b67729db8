// The CUDA engine's kernels behind plain C++ launch functions, so the
// engine's host code (g++) and the benchmarks call them without CUDA syntax.
// Every pointer argument is device memory unless its comment says host.
//
// Invariance contract (the GPU twin of engine/cpu/kernels.h): every output
// element's value depends only on the inputs it reads and on its reduction
// length, never on how many rows or tokens a launch covers, where a row sits
// in the batch, or on the grid and tile shapes the launcher picks. How each
// kernel keeps it: docs/CUDA.md, "Invariance".
//
// Shapes: E d_model, H query heads, KVH KV heads, D head_dim, F d_ff,
// V vocab, n tokens in the step, L layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/kv_dtype.h"

// Lets a plain C++ header declare a function that kernels call too.
#if defined(__CUDACC__)
#define KVCHECK_HOST_DEVICE __host__ __device__
#else
#define KVCHECK_HOST_DEVICE
#endif

namespace kvcheck::cuda {

// Where one fed token goes in one layer, faults already applied (the CPU
// engine's TokenPlan after at_layer): the storage unit and slot it writes,
// the RoPE / wpe position and how many of its sequence's slots it sees.
// Contiguous storage: the unit is the row and the slot the row's slot.
// Paged: the unit is the pool block holding the slot (resolved through the
// block table on the host) and the slot is within that block.
struct TokenSlot {
  int32_t row;       // storage unit written (a row, or a pool block when paged)
  int32_t position;  // RoPE / wpe position, in [0, max_pos)
  int32_t slot;      // slot written within the unit, in [0, unit slots)
  int32_t n_keys;    // the sequence's slots 0..n_keys-1 are visible, in [0, capacity]
  int32_t table;     // paged: the token's row of AttentionArgs::blocks; contiguous: unused
};

// The KV cache of all layers: k and v are each
//   [layer][unit][kv_head][slot][dim] elements of dtype,
// a unit being a row of `capacity` slots (contiguous storage) or a pool
// block of `capacity` = B slots (paged), so one (layer, unit, kv head) is a
// contiguous [capacity][D] block and a decode reads its keys in streams.
struct KvCacheView {
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::kF32;
  // rows: storage units; capacity: slots per unit.
  int rows = 0, n_kv_heads = 0, capacity = 0, head_dim = 0;

  // Element index of (layer, unit, kv_head, slot, 0).
  KVCHECK_HOST_DEVICE size_t offset(int layer, int row, int kv_head, int slot) const {
    return (((size_t(layer) * rows + row) * n_kv_heads + kv_head) * capacity + slot) *
           size_t(head_dim);
  }
};

// x[t][e] = tok_embedding[tokens[t]][e] (+ pos_embedding[plan[t].position][e]
// when pos_embedding is not null).  tokens: [n]; plan: [n]; x: [n][E].
void launch_embed(const int32_t* tokens, const TokenSlot* plan, const float* tok_embedding,
                  const float* pos_embedding, int n, int E, float* x, cudaStream_t stream);

// One row per token: LayerNorm (biased variance, two passes; bias may be
// null) or RMSNorm.  x, y: [n][E];  gain, bias: [E].
void launch_layer_norm(const float* x, const float* gain, const float* bias, int n, int E,
                       float eps, float* y, cudaStream_t stream);
void launch_rms_norm(const float* x, const float* gain, int n, int E, float eps, float* y,
                     cudaStream_t stream);

// Floats of `partial` scratch that launch_matmul needs for any `rows` when
// every matmul of a model has `in` <= max_in and `out` <= max_out.
size_t matmul_partial_floats(int max_in, int max_out);

// y[i][o] = sum_k x[i][k] w[o][k] (+ bias[o]).  x: [rows][in];  w: [out][in];
// bias: [out] or null;  y: [rows][out];  partial: scratch of
// matmul_partial_floats(in, out) floats or more.
void launch_matmul(const float* x, int rows, const float* w, const float* bias, int in, int out,
                   float* partial, size_t partial_floats, float* y, cudaStream_t stream);

// For each token: RoPE (when inv_freq is not null) on its H query heads and
// KVH key heads in qkv at plan[t].position, then stores its K and V heads
// into `layer` of the cache at (plan[t].row, plan[t].slot), rounding to the
// cache dtype (K into V's storage and V into K's when kv_swapped).
//   qkv: [n][H*D + 2*KVH*D] (q heads, k heads, v heads), rotated in place;
//   inv_freq: [D/2] doubles theta^(-2i/D), or null (gpt2).
// Tokens that share a (row, slot) under a fault are stored in token order,
// the last one winning, as on the CPU: pass in_token_order = true then.
void launch_rope_and_store(float* qkv, const TokenSlot* plan, int n, int H, const double* inv_freq,
                           KvCacheView cache, int layer, bool kv_swapped, bool in_token_order,
                           cudaStream_t stream);

// Fault rope_reapplied: rotates cached keys of `layer`, unit `row`, slots
// [slot_begin, slot_end), each once more at position slot + position_offset.
void launch_rope_cached_keys(KvCacheView cache, int layer, int row, int slot_begin, int slot_end,
                             int position_offset, const double* inv_freq, cudaStream_t stream);

// Keys per attention split: split s of a query covers absolute key slots
// [s * kAttentionSplitKeys, (s + 1) * kAttentionSplitKeys). Part of the
// reduction order, so it is a constant, never derived from the batch.
inline constexpr int kAttentionSplitKeys = 128;
// Head-dim limit of the attention kernel (its shared-memory key tile).
inline constexpr int kMaxAttentionHeadDim = 256;

struct AttentionArgs {
  const float* qkv = nullptr;  // [n][qkv_stride]; query head h at h*D
  int qkv_stride = 0;
  KvCacheView cache;
  int layer = 0;                    // storage layer
  int n_heads = 0;                  // H
  const TokenSlot* plan = nullptr;  // [n]
  int n_tokens = 0;
  int max_keys = 0;  // >= every plan[t].n_keys (host-side value)
  // Paged storage: key j of token t lies in slot j % block_size of unit
  // blocks[plan[t].table * blocks_stride + j / block_size]. Null: contiguous,
  // key j in slot j of unit plan[t].row.
  const int32_t* blocks = nullptr;  // [tables][blocks_stride] storage units
  int blocks_stride = 0;
  int block_size = 0;
  bool tiled_kv_heads = false;  // fault: query head h reads KV head h % KVH
  float scale = 1.0f;           // 1/sqrt(D)
  float* out = nullptr;         // [n][H*D]
  float* partial = nullptr;     // scratch, attention_partial_floats(n, H, D, max_keys)
};

// Scratch floats of one attention launch.
size_t attention_partial_floats(int n_tokens, int n_heads, int head_dim, int max_keys);

// Causal attention of every token's H query heads over its sequence's slots
// 0..plan[t].n_keys-1 (its row, or through its block table when paged; the
// same arithmetic in the same key order either way). Query head h reads KV head h / (H / KVH)
// (repeat_interleave, by index; nothing is materialised).
void launch_attention(const AttentionArgs& args, cudaStream_t stream);

// y[i] += x[i];  x[i] = gelu_tanh(x[i]);  gate[i] = silu(gate[i]) * up[i].  [count]
void launch_add(float* y, const float* x, size_t count, cudaStream_t stream);
void launch_gelu_tanh(float* x, size_t count, cudaStream_t stream);
void launch_silu_mul(float* gate, const float* up, size_t count, cudaStream_t stream);

// Storage moves of the operations (fork, copy on write, truncate, freeing),
// on every layer and KV head of the cache:
// slots [0, n) of unit `from` copied to unit `to`;
void copy_unit_slots(KvCacheView cache, int n_layers, int from, int to, int n, cudaStream_t stream);
// slots [first, end) of unit `unit` in layers 0..n_layers-1 set to the
// poison (0xFF bytes: NaN in f32, bf16 and f16).
void poison_unit_slots(KvCacheView cache, int n_layers, int unit, int first, int end,
                       cudaStream_t stream);

}  // namespace kvcheck::cuda
