// Storage types for cached K and V. Reduced precision rounds on write
// (round-to-nearest-even) and widens exactly to float on read. q8_0 stores
// int8 codes with one f32 scale per block of 32 elements along head_dim
// (docs/TOLERANCE.md, "The KV dtype"); its read is code * scale in float.
// q4_0 is ggml's 4-bit format (an f16 scale per block of 32, codes 0..15
// read as (code - 8) * scale), q5_0 its 5-bit one (codes 0..31 read as
// (code - 16) * scale), q5_1 its 5-bit form with a minimum (an f16 scale
// and an f16 minimum per block, codes 0..31 read as code * scale + min):
// cache types that out-of-process engines declare and
// whose snapshots arrive widened to f32; no in-tree engine stores them (not
// in their traits), so the row functions below do not.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/half_float.h"  // float_to_f16 and friends, used with these dtypes
#include "model/status.h"

namespace kvcheck {

enum class KvDtype : uint8_t { kF32, kBF16, kF16, kQ8_0, kQ4_0, kQ5_0, kQ5_1 };

// Bytes of one element's value (for q8_0, its code; the scales come on top:
// kv_row_bytes).
inline int kv_dtype_bytes(KvDtype t) {
  if (t == KvDtype::kF32) return 4;
  return t == KvDtype::kBF16 || t == KvDtype::kF16 ? 2 : 1;
}
const char* kv_dtype_name(KvDtype t);
// The names parse_kv_dtype accepts, for messages: "f32, bf16, ..., q5_0 or q5_1".
const char* kv_dtype_names();
Result<KvDtype> parse_kv_dtype(const std::string& name);

// q8_0: elements per scale block along head_dim. A head_dim that is not a
// multiple of 32 ends in one partial block of head_dim % 32 elements with
// its own scale (llama.cpp requires a multiple of 32; we do not).
inline constexpr size_t kQ8Block = 32;
inline size_t q8_blocks(size_t dim) {
  return (dim + kQ8Block - 1) / kQ8Block;
}

// Bytes of one stored K or V head row of `dim` elements. q8_0 rows are
// [blocks] f32 scales, then [dim] int8 codes, padded to 4 bytes so the next
// row's scales stay aligned; the other dtypes are [dim] elements.
inline size_t kv_row_bytes(KvDtype t, size_t dim) {
  if (t == KvDtype::kQ8_0) return 4 * q8_blocks(dim) + (dim + 3) / 4 * 4;
  return dim * size_t(kv_dtype_bytes(t));
}

// Element d of a stored row of `dim` elements, widened to float exactly as
// every kernel reads it (q8_0: float(code) * scale, one float rounding).
float kv_load(const uint8_t* row, KvDtype t, size_t dim, size_t d);
// Stores `dim` floats as one row. bf16/f16 round to nearest even. q8_0: each
// block's scale is amax / 127 (float division; 0 for an all-zero block, NaN
// when the block holds a NaN) unless `scales` ([blocks]) gives them, and each
// code is the nearest integer (ties to even) of x / scale, clamped to
// [-127, 127]; a zero or NaN scale stores code 0.
void kv_store_row(const float* src, KvDtype t, size_t dim, uint8_t* row,
                  const float* scales = nullptr);
// The scales kv_store_row computes for a q8_0 row.   src: [dim];  scales: [blocks]
void q8_scales(const float* src, size_t dim, float* scales);
// Marks a row unwritten: NaN in every element (q8_0: every scale).
void kv_poison_row(uint8_t* row, KvDtype t, size_t dim);

// Unit roundoff of the storage type: the relative error of one rounding.
inline double kv_dtype_unit_roundoff(KvDtype t) {
  switch (t) {
    case KvDtype::kF32:
      return 0x1p-24;
    case KvDtype::kBF16:
      return 0x1p-8;
    case KvDtype::kF16:
      return 0x1p-11;
    case KvDtype::kQ8_0:
    case KvDtype::kQ4_0:
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      return 0.0;  // not relative: a fraction of a scale step (docs/TOLERANCE.md)
  }
  return 0.0;
}

// The bit pattern a poisoned (never written) slot holds: a quiet NaN.
uint16_t poison_bits16(KvDtype t);

}  // namespace kvcheck
