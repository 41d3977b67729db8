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

// The type attention reads K in: the cache's, or kv_read where that is
// narrower. A quantized K meets q quantized to q8_0 by the same quantizer
// (ggml's vec_dot_type of q8_0 and q4_0 alike).
KvStorageError query_rounding(const ArithmeticTraits& a, KvDtype kv_dtype) {
  const KvStorageError stored = kv_storage_error(kv_dtype, a.kv_quantizer);
  if (stored.per_scale > 0) return kv_storage_error(KvDtype::kQ8_0, a.kv_quantizer);
  const Rounding read = rounding_to(a.kv_read);
  if (read.relative <= stored.relative) return stored;
  return as_storage(read);
}

}  // namespace

ArithmeticModel arithmetic_model(const ArithmeticTraits& a, KvDtype kv_dtype) {
  ArithmeticModel m;
  m.kv_dtype = kv_dtype;
  const Rounding accumulate = rounding_to(a.accumulation);
  const Rounding activations = rounding_to(a.activations);
  if (!accumulate.none()) m.sum = accumulate.relative;
  if (!activations.none()) m.single = activations.relative;
  m.output = activations;
  m.weight = rounding_to(a.weights).relative;
  m.rope_angles_in_float = a.rope_angles_in_float;
  m.storage = kv_storage_error(kv_dtype, a.kv_quantizer);
  // q is RoPE's output: rounded to narrower activations already (output).
  m.round_queries = a.queries_rounded_to_kv_dtype;
  m.query = query_rounding(a, kv_dtype);
  // A cache narrower than kv_read is read as stored.
  const Rounding read = rounding_to(a.kv_read);
  if (m.storage.per_scale == 0 && read.relative > m.storage.relative) m.kv_read = read;
  // Probabilities rounded to V's type as read (or, with narrower
  // activations, the softmax's output rounded to them).
  if (a.probabilities_rounded_to_kv_dtype) {
    const KvStorageError v_type = query_rounding(a, kv_dtype);
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
