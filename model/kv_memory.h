// KV-cache sizing of real models (`kvcheck memory`, docs/MEMORY.md). An
// independent formula, written from the lesson rather than from the engine:
// the test holds it against what the in-tree engine really allocates, so the
// two must never share this arithmetic (nor the engine's dtype sizes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/status.h"

namespace kvcheck {

// The storage types the calculator sizes; int8 goes beyond the engine's KvDtype.
enum class SizingDtype : uint8_t { kF32, kBF16, kF16, kInt8 };

const char* sizing_dtype_name(SizingDtype t);
Result<SizingDtype> parse_sizing_dtype(std::string_view name);
const std::vector<SizingDtype>& all_sizing_dtypes();  // f32, bf16, f16, int8

// int8 layout: each head vector (head_dim elements of one KV head at one
// position, K or V) is cut into blocks of 32 elements, the last one possibly
// shorter; each block stores its int8 codes and one f32 scale.
constexpr int kInt8BlockElements = 32;
constexpr int kInt8ScaleBytes = 4;

// What sizes a model's KV cache: the published shape.
struct KvShape {
  std::string name;     // preset name or config path
  int n_layers = 0;     // L
  int hidden = 0;       // residual width (shown, not used by the formula)
  int n_heads = 0;      // query heads H
  int n_kv_heads = 0;   // KV heads; divides H (MHA: H, MQA: 1, GQA: between)
  int head_dim = 0;     // D
  int max_context = 0;  // positions the model accepts
  int window = 0;       // sliding-window tokens a sequence keeps; 0: none

  // Empty when usable; otherwise one message naming the field and value.
  std::string validate() const;
};

// Bytes of one head vector (K or V of one KV head at one position).
uint64_t head_vector_bytes(int head_dim, SizingDtype dtype);

// Bytes one cached token costs one sequence: 2 * L * KVH * vector bytes.
uint64_t kv_bytes_per_token(const KvShape& shape, SizingDtype dtype);

// Tokens one sequence keeps at a context: min(context, window) under a window.
uint64_t cached_tokens(const KvShape& shape, uint64_t context);

// Total for `tokens` cached per sequence in `batch` sequences. Throws
// InputError when the product does not fit in 64 bits.
uint64_t kv_bytes(const KvShape& shape, SizingDtype dtype, uint64_t tokens, uint64_t batch);

}  // namespace kvcheck
