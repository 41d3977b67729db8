// The engine-vs-oracle tolerance, derived by forward error analysis
// (docs/TOLERANCE.md). A second double-precision pass over the sequence
// carries, next to every activation, a bound on how far the float32 engine's
// value can be from the exact one: each kernel's own rounding (standard model
// fl(a op b) = (a op b)(1 + d), |d| <= u, and the documented exp/tanh ulp
// errors) plus the propagation of its inputs' errors through that kernel's
// derivative. The result is a bound for every logit and every cached K/V
// element, so P1 and P6 report each comparison as error / bound.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_dtype.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// Unit roundoff of float32 arithmetic.
inline constexpr double kUnitRoundoff = 0x1p-24;
// Relative error of one exp / tanh evaluation on either kernel path: 2 and 4
// ulp (docs/KERNELS.md measures at most 0.985 and 2.60), one ulp of y being
// at most 2^-23 |y|.
inline constexpr double kExpRelativeError = 2 * 0x1p-23;
inline constexpr double kTanhRelativeError = 4 * 0x1p-23;

// gamma_n = n u / (1 - n u): the relative bound of an n-term float32 sum or
// dot product against the sum of its terms' magnitudes.
double gamma_n(double n);

// Rounding of one stored K/V element: |stored - x| <= relative |x| + absolute.
// f32 stores exactly; bf16 and f16 round to nearest even, and f16's absolute
// term covers its subnormal range (spacing 2^-24).
struct KvStorageError {
  double relative = 0;
  double absolute = 0;
};
KvStorageError kv_storage_error(KvDtype dtype);

struct ErrorBounds {
  int n_tokens = 0;             // T
  std::vector<double> logits;   // [T][V] bound on |engine logit - exact logit|
  std::vector<double> k;        // [L][T][KVH][D] bound on |cached K - exact K|, storage included
  std::vector<double> v;        // [L][T][KVH][D] bound on |cached V - exact V|, storage included
};

// Bounds for `tokens` at positions 0..T-1 on an engine that keeps K/V in
// `kv_dtype`. Same preconditions as oracle::forward (valid config, matching
// weights, tokens in range, T <= max_pos). O(T^2) like the oracle.
ErrorBounds derive_error_bounds(const Config& config, const Weights& weights,
                                std::span<const int32_t> tokens, KvDtype kv_dtype);

}  // namespace kvcheck
