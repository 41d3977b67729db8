// What storing a K/V element costs in each dtype: the rounding constants
// (kv_storage_error, q8_0's scale bounds, which P6 also uses with the
// engine's stored scale) and store_var, the bound P6 compares a stored
// element against. Apart from the kernels because it models the cache, not
// arithmetic: a new K/V dtype changes this file alone.
#include <algorithm>
#include <cmath>

#include "properties/tolerance.h"
#include "properties/tolerance_kernels.h"

namespace kvcheck {

double gamma_n(double n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

KvStorageError kv_storage_error(KvDtype dtype, KvQuantizer quantizer) {
  switch (dtype) {
    case KvDtype::kF32:
      return {0.0, 0.0};
    case KvDtype::kBF16:
      return {kv_dtype_unit_roundoff(dtype), 0x1p-134};
    case KvDtype::kF16:
      return {kv_dtype_unit_roundoff(dtype), 0x1p-25};
    case KvDtype::kQ8_0:
      // ggml: a code of the unrounded scale d is within d (1/2 + 2^-16) of
      // the value, and |code| <= 127 codes times |d - fp16(d)| <= 2^-11 d +
      // 2^-25 (normal, subnormal) (docs/TOLERANCE.md, "ggml's q8_0").
      if (quantizer == KvQuantizer::kGgml)
        return {0.0, 127 * 0x1p-25, 0.5 + 0x1p-16 + 127 * 0x1p-11, 127};
      return {0.0, 0.0, 0.5 + 0x1p-16, 127};
    case KvDtype::kQ4_0:
      // ggml's only (no kvcheck codec): d = (the signed largest element) / -8,
      // codes min(15, floor(x / d + 8.5)): half a code, but a whole one for
      // an element of the other sign at >= 15/16 of amax (the clamp at 15),
      // plus 8 codes times the f16 scale's rounding (docs/TOLERANCE.md,
      // "ggml's q4_0"); the scale's magnitude is amax / 8.
      return {0.0, 8 * 0x1p-25, 1 + 0x1p-16 + 8 * 0x1p-11, 8};
    case KvDtype::kQ5_0:
      // ggml's only, q4_0's rule with 5 bits: d = (the signed largest
      // element) / -16, codes min(31, floor(x / d + 16.5)): a whole code at
      // the clamp, plus 16 codes times the f16 scale's rounding
      // (docs/TOLERANCE.md, "ggml's q5_0"); the scale's magnitude is amax / 16.
      return {0.0, 16 * 0x1p-25, 1 + 0x1p-16 + 16 * 0x1p-11, 16};
    case KvDtype::kQ5_1:
      // ggml's only: d = (max - min) / 31, codes (x - min) / d + 0.5
      // truncated (half a code, never clamped), read code * fp16(d) +
      // fp16(min) (one float rounding, u |y|): 31 codes times the scale's
      // f16 rounding, the min's own f16 rounding (docs/TOLERANCE.md,
      // "ggml's q5_1"); the scale's magnitude is the block's range / 31.
      return {kUnitRoundoff, 32 * 0x1p-25, 0.5 + 0x1p-16 + 31 * 0x1p-11, 31, 0x1p-11};
  }
  return {};
}

namespace {

// ggml's unrounded scale d from its stored f16 scale s: |d - s| <= 2^-11 d
// + 2^-25, so d <= (|s| + 2^-25) / (1 - 2^-11).
double ggml_unrounded_scale(double stored_scale) {
  return (std::abs(stored_scale) + 0x1p-25) / (1 - 0x1p-11);
}

}  // namespace

double q8_element_bound(double computed, double stored_scale, KvQuantizer quantizer) {
  const KvStorageError e = kv_storage_error(KvDtype::kQ8_0, quantizer);
  if (quantizer == KvQuantizer::kGgml) {
    return computed + ggml_unrounded_scale(stored_scale) * e.per_scale + e.absolute;
  }
  return computed + std::abs(stored_scale) * e.per_scale;
}

double q8_scale_bound(double block_computed_max, double stored_scale, KvQuantizer quantizer) {
  if (quantizer == KvQuantizer::kGgml) {
    return block_computed_max / 127 +
           (kUnitRoundoff + 0x1p-11) * ggml_unrounded_scale(stored_scale) + 0x1p-25;
  }
  return block_computed_max / 127 + kUnitRoundoff * std::abs(stored_scale) / (1 - kUnitRoundoff);
}

namespace tolerance {

BlockRange block_range(const double* value, const double* var, int n) {
  BlockRange r{INFINITY, -INFINITY, 0, 0};
  for (int i = 0; i < n; ++i) {
    r.min = std::min(r.min, value[i]), r.max = std::max(r.max, value[i]);
    r.amax = std::max(r.amax, std::abs(value[i]));
    r.computed_max = std::max(r.computed_max, kConfidence * std::sqrt(var[i]));
  }
  return r;
}

BlockSumError q8_1_block_sum_error(const double* q, const double* var_q, const double* k,
                                   const double* var_k, int n) {
  const BlockRange kr = block_range(k, var_k, n), qr = block_range(q, var_q, n);
  // |min^| of the computed block, and the stored f16 minimum's magnitude.
  const double k_min = std::abs(kr.min) + kr.computed_max;
  const double m = k_min * (1 + 0x1p-11) + 0x1p-25;
  // q8_1's unrounded scale d' is at most amax / 127 of the computed q; a
  // code c' is within d' (1/2 + 2^-16) of q^ / d' and a read c' fp16(d')
  // within ggml's q8_0 storage error of q^, so both d' |sum c'| and
  // sum |q~| are at most the sum of |q| plus n (computed error + d').
  const double d = (qr.amax + qr.computed_max) / 127 * (1 + kUnitRoundoff);
  double q_sum = 0;
  for (int i = 0; i < n; ++i) q_sum += std::abs(q[i]);
  q_sum += n * (qr.computed_max + d + 127 * 0x1p-25);
  // s' - fp16(d') S, S = sum c' (|S| <= 127 n): fl(d' S) rounds (u), fp16
  // rounds it (2^-11 relative, 2^-25 absolute), and fp16(d') is off d' by
  // 2^-11 d' + 2^-25 times |S|.
  BlockSumError e;
  e.sum = m * ((0x1p-10 + 0x1p-22) * q_sum + 0x1p-25 * (1 + 127.0 * n));
  // fp16(min^) - min^, one error for the block: times sum q~.
  e.min = (0x1p-11 * k_min + 0x1p-25) * q_sum;
  return e;
}

namespace {

// The largest scale a correct engine computes for a block (the computed
// values within computed_max of the exact ones): amax / levels, or with a
// stored minimum the range / levels (fl(max - min) then / levels: two
// roundings); plus the stored minimum's rounding, min_relative |min^|.
double block_storage(const KvStorageError& storage, const BlockRange& r) {
  if (storage.min_relative > 0) {
    const double scale = (r.max - r.min + 2 * r.computed_max) / storage.levels;
    return storage.per_scale * scale * sq(1 + kUnitRoundoff) +
           storage.min_relative * (std::abs(r.min) + r.computed_max);
  }
  return storage.per_scale * ((r.amax + r.computed_max) / storage.levels * (1 + kUnitRoundoff));
}

}  // namespace

// kConfidence deviations of the computed value, then storage's rounding of
// it at its worst, |x^ (1 + r) - x| <= |x^ - x| (1 + r) + r |x| + a (+ p s
// for a quantized type: p codes of the block's scale s, at most
// fl((amax + the block's largest computed bound) / levels): block_storage).
// Attention reads the stored value, whose storage rounding enters its
// variance as one more bounded term.
void store_var(const double* value, double* var, double* bound, double* computed, int KVH, int D,
               const KvStorageError& storage, bool pair_order) {
  const bool quantized = storage.per_scale > 0;
  if (computed != nullptr) {
    for (int i = 0; i < KVH * D; ++i) computed[i] = kConfidence * std::sqrt(var[i]);
  }
  const auto store = [&](int i, double block) {
    const double stored = storage.relative * std::abs(value[i]) + storage.absolute + block;
    if (bound != nullptr)
      bound[i] = kConfidence * std::sqrt(var[i]) * (1 + storage.relative) + stored;
    var[i] = var[i] * sq(1 + storage.relative) + stored * stored;
  };
  for (int g = 0; g < KVH; ++g) {
    if (!quantized) {
      for (int i = g * D; i < (g + 1) * D; ++i) store(i, 0.0);
      continue;
    }
    for (int first = 0; first < D; first += int(kQ8Block)) {
      const BlockGather b(value + g * D, var + g * D, first, std::min(D - first, int(kQ8Block)), D,
                          pair_order);
      const double block = block_storage(storage, block_range(b.value, b.var, b.n));
      for (int i = 0; i < b.n; ++i) store(g * D + b.index[i], block);
    }
  }
}

}  // namespace tolerance
}  // namespace kvcheck
