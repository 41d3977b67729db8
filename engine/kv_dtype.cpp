// K/V storage dtypes: names, row sizes and the quantizers (q8_0, q4_0, q5_0)
// the engines store with; the f16/bf16 codec itself is model/half_float.h.
#include "engine/kv_dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvcheck {

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kQ8_0:
      return "q8_0";
    case KvDtype::kQ4_0:
      return "q4_0";
    case KvDtype::kQ5_0:
      return "q5_0";
    case KvDtype::kQ5_1:
      return "q5_1";
  }
  return "?";
}

const char* kv_dtype_names() {
  return "f32, bf16, f16, q8_0, q4_0, q5_0 or q5_1";
}

Result<KvDtype> parse_kv_dtype(const std::string& name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "bf16") return KvDtype::kBF16;
  if (name == "f16") return KvDtype::kF16;
  if (name == "q8_0") return KvDtype::kQ8_0;
  if (name == "q4_0") return KvDtype::kQ4_0;
  if (name == "q5_0") return KvDtype::kQ5_0;
  if (name == "q5_1") return KvDtype::kQ5_1;
  return Result<KvDtype>::failure(std::string("kv_dtype: expected ") + kv_dtype_names() +
                                  ", got \"" + name + "\"");
}

namespace {

float q8_scale(const float* src, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(src[i])) return src[i];  // a NaN input stays visible
    amax = std::max(amax, std::abs(src[i]));
  }
  return amax / 127.0f;
}

}  // namespace

void q8_scales(const float* src, size_t dim, float* scales) {
  for (size_t b = 0; b < q8_blocks(dim); ++b) {
    const size_t first = b * kQ8Block;
    scales[b] = q8_scale(src + first, std::min(kQ8Block, dim - first));
  }
}

float kv_load(const uint8_t* row, KvDtype t, size_t dim, size_t d) {
  switch (t) {
    case KvDtype::kF32: {
      float f;
      std::memcpy(&f, row + 4 * d, 4);
      return f;
    }
    case KvDtype::kBF16:
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * d, 2);
      return t == KvDtype::kBF16 ? bf16_to_float(h) : f16_to_float(h);
    }
    case KvDtype::kQ8_0: {
      float scale;
      std::memcpy(&scale, row + 4 * (d / kQ8Block), 4);
      const auto code = static_cast<int8_t>(row[4 * q8_blocks(dim) + d]);
      return static_cast<float>(code) * scale;
    }
    case KvDtype::kQ4_0:  // never stored in process (kv_dtype.h)
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      break;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

void kv_store_row(const float* src, KvDtype t, size_t dim, uint8_t* row, const float* scales) {
  switch (t) {
    case KvDtype::kF32:
      std::memcpy(row, src, dim * sizeof(float));
      return;
    case KvDtype::kBF16:
    case KvDtype::kF16:
      for (size_t i = 0; i < dim; ++i) {
        const uint16_t h = t == KvDtype::kBF16 ? float_to_bf16(src[i]) : float_to_f16(src[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kQ8_0: {
      const size_t blocks = q8_blocks(dim);
      auto* codes = reinterpret_cast<int8_t*>(row + 4 * blocks);
      for (size_t b = 0; b < blocks; ++b) {
        const size_t first = b * kQ8Block, n = std::min(kQ8Block, dim - first);
        const float scale = scales != nullptr ? scales[b] : q8_scale(src + first, n);
        std::memcpy(row + 4 * b, &scale, 4);
        for (size_t i = first; i < first + n; ++i) {
          // x / scale is within 127 (1 + u)^2 < 127.5 of zero for the block's
          // own scale, so the clamp only bites under a foreign scale.
          const float q =
              scale != 0.0f && std::isfinite(scale) ? std::nearbyint(src[i] / scale) : 0.0f;
          codes[i] = static_cast<int8_t>(std::isnan(q) ? 0.0f : std::clamp(q, -127.0f, 127.0f));
        }
      }
      std::memset(row + 4 * blocks + dim, 0, kv_row_bytes(t, dim) - 4 * blocks - dim);
      return;
    }
    case KvDtype::kQ4_0:  // never stored in process (kv_dtype.h)
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      return;
  }
}

void kv_poison_row(uint8_t* row, KvDtype t, size_t dim) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  switch (t) {
    case KvDtype::kF32:
      for (size_t i = 0; i < dim; ++i) std::memcpy(row + 4 * i, &nan, 4);
      return;
    case KvDtype::kBF16:
    case KvDtype::kF16: {
      const uint16_t h = poison_bits16(t);
      for (size_t i = 0; i < dim; ++i) std::memcpy(row + 2 * i, &h, 2);
      return;
    }
    case KvDtype::kQ8_0:
      for (size_t b = 0; b < q8_blocks(dim); ++b) std::memcpy(row + 4 * b, &nan, 4);
      std::memset(row + 4 * q8_blocks(dim), 0, kv_row_bytes(t, dim) - 4 * q8_blocks(dim));
      return;
    case KvDtype::kQ4_0:  // never stored in process (kv_dtype.h)
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      return;
  }
}

uint16_t poison_bits16(KvDtype t) {
  return t == KvDtype::kBF16 ? 0x7FC0 : 0x7E00;
}

}  // namespace kvcheck
