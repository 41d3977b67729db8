// Little-endian integers and floats appended to a byte buffer, the byte order
// of every file format kvcheck writes (safetensors, GGUF).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace kvcheck {

// The low `bytes` bytes of `value`, least significant first.
inline void append_le(std::vector<uint8_t>& out, uint64_t value, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<uint8_t>(value >> (8 * k)));
}

inline void append_f32le(std::vector<uint8_t>& out, float value) {
  append_le(out, std::bit_cast<uint32_t>(value), 4);
}

// A run of floats, each as append_f32le writes it, in one resize (and one copy
// on a little-endian host): a model written for an exec engine per case spent
// most of its writing time pushing bytes one at a time.
inline void append_f32le(std::vector<uint8_t>& out, std::span<const float> values) {
  const size_t at = out.size();
  out.resize(at + 4 * values.size());
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out.data() + at, values.data(), 4 * values.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
      for (int k = 0; k < 4; ++k) out[at + 4 * i + size_t(k)] = uint8_t(bits >> (8 * k));
    }
  }
}

}  // namespace kvcheck
