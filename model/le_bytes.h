// Little-endian integers and floats appended to a byte buffer, the byte order
// of every file format kvcheck writes (safetensors, GGUF).
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace kvcheck {

// The low `bytes` bytes of `value`, least significant first.
inline void append_le(std::vector<uint8_t>& out, uint64_t value, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<uint8_t>(value >> (8 * k)));
}

inline void append_f32le(std::vector<uint8_t>& out, float value) {
  append_le(out, std::bit_cast<uint32_t>(value), 4);
}

}  // namespace kvcheck
