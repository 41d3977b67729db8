// Storage types for cached K and V. Reduced precision rounds on write
// (round-to-nearest-even) and widens exactly to float on read.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/status.h"

namespace kvcheck {

enum class KvDtype : uint8_t { kF32, kBF16, kF16 };

inline int kv_dtype_bytes(KvDtype t) {
  return t == KvDtype::kF32 ? 4 : 2;
}
const char* kv_dtype_name(KvDtype t);
Result<KvDtype> parse_kv_dtype(const std::string& name);

// Unit roundoff of the storage type: the relative error of one rounding.
inline double kv_dtype_unit_roundoff(KvDtype t) {
  switch (t) {
    case KvDtype::kF32:
      return 0x1p-24;
    case KvDtype::kBF16:
      return 0x1p-8;
    case KvDtype::kF16:
      return 0x1p-11;
  }
  return 0.0;
}

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

// The bit pattern a poisoned (never written) slot holds: a quiet NaN.
uint16_t poison_bits16(KvDtype t);

}  // namespace kvcheck
