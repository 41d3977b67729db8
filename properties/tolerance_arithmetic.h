// What an engine's declared arithmetic (engine/traits.h, ArithmeticTraits)
// means in numbers for each kernel of the tolerance: the unit roundoff of
// its sums, of its single roundings, the rounding of every kernel's output,
// of the weights, and the extra roundings attention makes (queries, K/V as
// read, probabilities, the running sum of flash attention). One place turns
// the declaration into numbers, so the kernels read only numbers and the
// f32 model is the default of every field (docs/TOLERANCE.md, "Reduced-
// precision arithmetic"). Internal to properties/tolerance*.cpp.
#pragma once

#include <cmath>

#include "engine/kv_dtype.h"
#include "engine/traits.h"
#include "properties/tolerance.h"

namespace kvcheck::tolerance {

// Rounding one value to a narrower type: |fl(x) - x| <= relative |x| +
// absolute (half the spacing of the type's subnormals). `none` for f32
// where the f32 model already counts the rounding.
struct Rounding {
  double relative = 0, absolute = 0;
  double of(double x) const { return relative * std::abs(x) + absolute; }
  bool none() const { return relative == 0 && absolute == 0; }
};
// bf16: 2^-8 and 2^-134; f16: 2^-11 and 2^-25; f32: none.
Rounding rounding_to(Precision p);

struct ArithmeticModel {
  // The unit roundoff of every sum and dot product (u, or the declared
  // accumulation type's).
  double sum = kUnitRoundoff;
  // The unit roundoff of a kernel's single roundings (products, divisions,
  // the cast of a constant): u, or the activation type's where each
  // elementary operation's output is rounded to it.
  double single = kUnitRoundoff;
  Rounding output;    // every kernel's output rounded to the activation type
  double weight = 0;  // relative rounding of every weight (0: f32 weights)
  bool rope_angles_in_float = false;
  // Storage of K and of V in the cache (each its own type: ArithmeticTraits::
  // v_dtype), and the rounding of q before QK^T (the type attention reads K
  // in: K's, narrowed by kv_read).
  KvStorageError storage_k, storage_v;
  bool round_queries = false;
  KvStorageError query;  // relative/absolute, or per_scale of a q8_0 block of q
  // q quantized to q8_1 blocks against a K with a stored minimum (q5_1):
  // the stored block sum's and the shared minimum's terms of each score.
  bool query_block_sums = false;
  // K's and q's quantization blocks in adjacent-pair order (a llama model
  // whose engine declares k_blocks_in_pair_order: the pass sets it).
  bool k_pair_order = false;
  Rounding kv_read_k;  // K rounded as attention reads it
  Rounding kv_read_v;  // V rounded as attention reads it
  Rounding probabilities;
  // Probabilities quantized in blocks (V's type quantized, ggml's mul_mat):
  // per_scale codes of a scale at most max_j p_j / levels.
  KvStorageError probability_blocks;
  bool online_softmax = false;
  Rounding value_accumulation;
  KvDtype k_dtype = KvDtype::kF32, v_dtype = KvDtype::kF32;
};

// The model of `a` for a cache of `kv_dtype` (K's type; V's too unless `a`
// declares v_dtype).
ArithmeticModel arithmetic_model(const ArithmeticTraits& a, KvDtype kv_dtype);

}  // namespace kvcheck::tolerance
