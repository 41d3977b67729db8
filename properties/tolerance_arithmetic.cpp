// The declared arithmetic turned into the numbers the tolerance's kernels
// read (tolerance_arithmetic.h says why it is one place). Each line is one
// row of docs/TOLERANCE.md, "Reduced-precision arithmetic".
#include "properties/tolerance_arithmetic.h"

namespace kvcheck::tolerance {

Rounding rounding_to(Precision p) {
  switch (p) {
    case Precision::kF32:
      return {};
    case Precision::kBF16:
      return {0x1p-8, 0x1p-134};
    case Precision::kF16:
      return {0x1p-11, 0x1p-25};
  }
  return {};
}

namespace {

// The storage model of a type narrower than the cache's: rounding to it.
KvStorageError as_storage(Rounding r) {
  return {r.relative, r.absolute};
}

// The type attention reads a stored K or V type in: its own, or kv_read
// where that is narrower. A quantized one meets its operand (q for K, the
// probabilities for V) quantized to q8_0 by the same quantizer (ggml's
// vec_dot_type of q8_0, q4_0 and q5_0 alike; q5_1's q8_1 has q8_0's codes
// and scale, and a block sum: query_block_sums).
KvStorageError read_type(const ArithmeticTraits& a, KvDtype dtype) {
  const KvStorageError stored = kv_storage_error(dtype, a.kv_quantizer);
  if (stored.per_scale > 0) return kv_storage_error(KvDtype::kQ8_0, a.kv_quantizer);
  const Rounding read = rounding_to(a.kv_read);
  if (read.relative <= stored.relative) return stored;
  return as_storage(read);
}

// A stored type narrower than kv_read, or quantized, is read as stored;
// a wider one is rounded to kv_read as attention reads it (llama.cpp casts
// K and V each on its own: an f32 one to f16).
Rounding read_rounding(const ArithmeticTraits& a, const KvStorageError& stored) {
  const Rounding read = rounding_to(a.kv_read);
  if (stored.per_scale == 0 && read.relative > stored.relative) return read;
  return {};
}

}  // namespace

ArithmeticModel arithmetic_model(const ArithmeticTraits& a, KvDtype kv_dtype) {
  ArithmeticModel m;
  // K in the cache's type; V in its own where the engine declares one.
  m.k_dtype = kv_dtype;
  m.v_dtype = a.v_dtype.value_or(kv_dtype);
  const Rounding accumulate = rounding_to(a.accumulation);
  const Rounding activations = rounding_to(a.activations);
  if (!accumulate.none()) m.sum = accumulate.relative;
  if (!activations.none()) m.single = activations.relative;
  m.output = activations;
  m.weight = rounding_to(a.weights).relative;
  m.rope_angles_in_float = a.rope_angles_in_float;
  m.storage_k = kv_storage_error(m.k_dtype, a.kv_quantizer);
  m.storage_v = kv_storage_error(m.v_dtype, a.kv_quantizer);
  // q is RoPE's output: rounded to narrower activations already (output).
  m.round_queries = a.queries_rounded_to_kv_dtype;
  m.query = read_type(a, m.k_dtype);
  // q5_1's vec_dot_type is q8_1: q8_0's codes and scale, plus a stored sum.
  m.query_block_sums = m.round_queries && m.storage_k.min_relative > 0;
  m.kv_read_k = read_rounding(a, m.storage_k);
  m.kv_read_v = read_rounding(a, m.storage_v);
  // Probabilities rounded to V's type as read (or, with narrower
  // activations, the softmax's output rounded to them).
  if (a.probabilities_rounded_to_kv_dtype) {
    const KvStorageError v_type = read_type(a, m.v_dtype);
    if (v_type.per_scale > 0) {
      m.probability_blocks = v_type;
    } else {
      m.probabilities = {v_type.relative, v_type.absolute};
    }
  }
  if (activations.relative > m.probabilities.relative) m.probabilities = activations;
  m.online_softmax = a.online_softmax;
  m.value_accumulation = rounding_to(a.value_accumulation);
  return m;
}

}  // namespace kvcheck::tolerance
