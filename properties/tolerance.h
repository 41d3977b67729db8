// The engine-vs-oracle tolerance, derived by probabilistic forward error
// analysis (docs/TOLERANCE.md). A second double-precision pass over the
// sequence carries, next to every activation, the variance of the engine's
// first-order error under its declared arithmetic (f32 unless it declares
// less: tolerance_arithmetic.h) and the standard model fl(a op b) =
// (a op b)(1 + d), |d| <= u, with the d's independent and mean zero
// (Higham & Mary 2019): each kernel adds its own rounding, and its inputs'
// variances flow through its derivative. A comparison's bound is
// kConfidence standard deviations (Hoeffding: exceeded with probability
// <= 2 exp(-kConfidence^2 / 2) under the model). The worst-case (every
// rounding aligned) bound grows by the operator norms of every layer and is
// useless past two layers; docs/TOLERANCE.md shows why and measures the
// margin this one keeps. Code: tolerance_pass.cpp (the one pass behind both
// derive_* functions), tolerance_kernels.h (per-op error models, whose
// values are the oracle's ops), tolerance_storage.cpp (K/V storage rounding).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_dtype.h"
#include "engine/traits.h"
#include "model/config.h"
#include "model/weights.h"
#include "oracle/oracle.h"

namespace kvcheck {

// Unit roundoff of float32 arithmetic.
inline constexpr double kUnitRoundoff = 0x1p-24;
// Relative error of one exp / tanh evaluation on either kernel path: 2 and 4
// ulp (docs/KERNELS.md measures at most 0.985 and 2.60), one ulp of y being
// at most 2^-23 |y|.
inline constexpr double kExpRelativeError = 2 * 0x1p-23;
inline constexpr double kTanhRelativeError = 4 * 0x1p-23;
// Standard deviations a comparison may be off: 2 exp(-8.5^2 / 2) = 4e-16 per
// comparison, so a day-long campaign (~1e11 logits) expects 4e-5 false alarms.
inline constexpr double kConfidence = 8.5;

// gamma_n = n u / (1 - n u): the relative bound of an n-term float32 sum or
// dot product against the sum of its terms' magnitudes.
double gamma_n(double n);

// Rounding of one stored K/V element: |stored - x| <= relative |x| + absolute
// + per_scale * s, s the element's block scale (quantized dtypes only, whose
// scale is the block's amax / levels). f32 stores exactly; bf16 and f16
// round to nearest even, and f16's absolute term covers its subnormal range
// (spacing 2^-24). kvcheck's q8_0 is off by half a code plus the float
// division and product: s (1/2 + 2^-16); ggml's q8_0 (an f16 scale, codes
// from the unrounded one) by d (1/2 + 2^-16 + 127 2^-11) + 127 2^-25, d the
// unrounded scale (docs/TOLERANCE.md, "ggml's q8_0"). ggml's q5_1 stores
// an f16 minimum too: + min_relative |min| (2^-11), and its scale is the
// block's range / levels, not amax / levels ("ggml's q5_1").
struct KvStorageError {
  double relative = 0;
  double absolute = 0;
  double per_scale = 0;
  double levels = 0;        // the largest code: the scale is amax / levels
  double min_relative = 0;  // > 0: a stored minimum, the scale (max - min) / levels
};
KvStorageError kv_storage_error(KvDtype dtype, KvQuantizer quantizer = KvQuantizer::kKvcheck);

// q8_0, given the engine's stored scale s of an element's block, whose
// computed value (before storage) is within `computed` of the exact x:
// |stored - x| <= computed + s (1/2 + 2^-16) (kvcheck's quantizer; ggml's:
// the unrounded scale recovered from s, as above).
double q8_element_bound(double computed, double stored_scale,
                        KvQuantizer quantizer = KvQuantizer::kKvcheck);
// q8_0: a correct engine's scale is fl(amax / 127) of its computed block, so
// |s - amax(exact block) / 127| <= max(computed bounds of the block) / 127
// + u |s| / (1 - u); ggml's f16 scale adds its own rounding.
double q8_scale_bound(double block_computed_max, double stored_scale,
                      KvQuantizer quantizer = KvQuantizer::kKvcheck);

struct ErrorBounds {
  int n_tokens = 0;  // T
  // kConfidence standard deviations of the engine's error.
  std::vector<double> logits;  // [T][V] bound on |engine logit - exact logit|
  // kConfidence standard deviations of the computed K/V, plus the storage
  // rounding at its worst case (it dominates in bf16/f16).
  std::vector<double> k;  // [L][T][KVH][D] bound on |cached K - exact K|
  std::vector<double> v;  // [L][T][KVH][D] bound on |cached V - exact V|
  // q8_0 only (each empty where K's, V's type is not q8_0): the bound of
  // the computed K/V before storage, which P6 completes with the engine's
  // stored scale (q8_element_bound); k and v above use the largest scale a
  // correct engine can store instead.
  std::vector<double> k_computed;                 // [L][T][KVH][D]
  std::vector<double> v_computed;                 // [L][T][KVH][D]
  KvQuantizer quantizer = KvQuantizer::kKvcheck;  // whose q8_0 the element bounds model
};

// Bounds for `tokens` at positions 0..T-1 on an engine that keeps K/V in
// `kv_dtype`. Same preconditions as oracle::forward (valid config, matching
// weights, tokens in range, T <= max_pos). O(T^2) like the oracle.
// arithmetic: what the engine declares it computes in (engine/traits.h);
// the default is f32 throughout. With rope_angles_in_float the engine
// computes RoPE angles as llama.cpp does, pos * powf(base, -2/D)^i by
// repeated float products, and the bound includes each angle's error, which
// grows with the position; every other field is a row of docs/TOLERANCE.md,
// "Reduced-precision arithmetic".
// value_track (optional): receives the exact values the bounds were
// propagated along (logits, and K/V as cached), computed with the oracle's
// ops: oracle::forward's output bit for bit (tested).
ErrorBounds derive_error_bounds(const Config& config, const Weights& weights,
                                std::span<const int32_t> tokens, KvDtype kv_dtype,
                                const ArithmeticTraits& arithmetic = {},
                                oracle::Output* value_track = nullptr);

// derive_error_bounds of the first n <= T tokens, taken from the bounds of
// all T: causal like the oracle, so equal bit for bit (tested).
ErrorBounds prefix(const ErrorBounds& full, int n, int n_layers);

// The bounds of one sequence's history of feeds, erases, shifts and
// truncations (oracle::replay's events; llama family): each fed token's
// logits, and the cells alive after the last event. A shift re-rotates a
// stored key in float, as the engine does: the stored value's variance
// passes through the rotation by delta (rope_var: cos^2, sin^2 and 3u of
// each output's two terms) and the rotated key is stored again, adding the
// dtype's storage rounding once more (docs/TOLERANCE.md, "Re-rotating a
// stored key"). arithmetic: as for derive_error_bounds; float RoPE angles
// apply to the fed keys' angles and each shift's (delta * frequency) alike.
struct HistoryBounds {
  std::vector<double> logits;      // [feeds][V]
  std::vector<double> k, v;        // [L][C][KVH][D] the cells after the last event
  std::vector<double> k_computed;  // q8_0 only: [L][C][KVH][D] before the last storage
  std::vector<double> v_computed;  // q8_0 only: [L][C][KVH][D]
  KvQuantizer quantizer = KvQuantizer::kKvcheck;
};
HistoryBounds derive_history_bounds(const Config& config, const Weights& weights,
                                    std::span<const oracle::Event> events, KvDtype kv_dtype,
                                    const ArithmeticTraits& arithmetic = {});

}  // namespace kvcheck
