// Scalar f16/bf16 rounding and widening (model/half_float.h): bit
// arithmetic, so the result never depends on the host's FPU modes beyond
// nearbyint's default round-to-even.
#include "model/half_float.h"

#include <bit>
#include <cmath>

namespace kvcheck {

uint16_t float_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // stay NaN
  // Round to nearest even on the 16 bits that are dropped.
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(uint32_t{h} << 16);
}

uint16_t float_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const uint32_t abs = bits & 0x7FFFFFFF;
  if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);   // NaN
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to inf
  if (abs < 0x38800000) {
    // Subnormal f16 (or zero): value = m * 2^-24; round |f| * 2^24 to even.
    const float scaled = std::bit_cast<float>(abs) * 0x1p24f;  // exact: power of two
    const float rounded = std::nearbyint(scaled);              // default mode: to even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rounded));
  }
  // Normal: rebias exponent (127 -> 15), round the 13 dropped mantissa bits to even.
  uint32_t h = abs - ((127 - 15) << 23);
  h += 0x0FFF + ((h >> 13) & 1);
  return static_cast<uint16_t>(sign | (h >> 13));
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

}  // namespace kvcheck
