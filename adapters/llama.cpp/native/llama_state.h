// llama.cpp's sequence state (llama_state_seq_get_data) read back as the
// cells and f32 K/V it holds, so that P6 can compare what llama.cpp stored
// with the oracle. The C++ twin of ../state_file.mjs for the native driver,
// f32 caches only (the driver runs no other).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvcheck::llama_native {

// One sequence's cells as llama_kv_cache::state_write wrote them (llama.cpp
// v0.5.0, src/llama-kv-cache.cpp): the stream that holds the sequence.
struct StoredSequence {
  std::vector<int32_t> positions;  // [cell] position
  std::vector<std::vector<float>> k,
      v;  // [layer][cell][width] as stored (K: adjacent-pair RoPE layout)
};

// Throws std::runtime_error naming what does not match (a type other than
// F32, a row of another width, bytes left over or missing). `width` =
// KVH * D.
StoredSequence parse_sequence_state(std::span<const uint8_t> bytes, int layers, int width);

// K of one head row, stored in llama.cpp's adjacent-pair layout (the GGUF
// writer's permutation, model/tensor_layout.h), back in kvcheck's
// rotate-half layout: stored element 2i + j is canonical j * (D/2) + i.
void unpermute_heads(std::span<const float> stored, int kv_heads, int head_dim,
                     std::span<float> out);

}  // namespace kvcheck::llama_native
