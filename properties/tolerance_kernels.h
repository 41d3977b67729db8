// The tolerance's kernels: one function per model op, each computing the op's
// value and the variance of the engine's first-order error in it under the
// declared arithmetic (tolerance_arithmetic.h; docs/TOLERANCE.md). Internal
// to properties/tolerance*.cpp.
//
// Exists apart from the pass that composes them (tolerance_pass.cpp) so that
// each kernel's error model reads on its own, next to the op it models. The
// VALUE half of every kernel is the oracle's op itself (oracle/ops.h), called,
// never rewritten: the tolerance's value track is then oracle::forward bit
// for bit (tested), and a fix to an op cannot reach one domain and miss the
// other. Only the variance arithmetic lives here.
//
// Shapes are written [outer][inner], row-major, as in oracle/ops.h.
#pragma once

#include <vector>

#include "engine/kv_dtype.h"
#include "model/weights.h"
#include "properties/tolerance.h"
#include "properties/tolerance_arithmetic.h"

namespace kvcheck::tolerance {

// The derivations' notation (docs/TOLERANCE.md): u, the unit roundoff.
inline constexpr double u = kUnitRoundoff;

inline size_t sz(int n) {
  return static_cast<size_t>(n);
}

inline double sq(double a) {
  return a * a;
}

// y = W x + b (oracle::linear) and the variance of the float result's error.
//   w: [out][in];  b: [out] or empty;  x, var_x: [in];  y, var_y: [out].
void linear_var(const std::vector<float>& w, const std::vector<float>& b, const double* x,
                const double* var_x, int in, int out, double* y, double* var_y,
                const ArithmeticModel& m);

// The family's norm of one row (oracle::layer_norm or rms_norm), with its
// error variance.   x, var_x, gain, bias: [E];  y, var_y: [E].
void norm_var(bool layer_norm, const double* x, const double* var_x, const std::vector<float>& gain,
              const std::vector<float>& bias, int width, double eps, double* y, double* var_y,
              const ArithmeticModel& m);

// RoPE's angles at one position (or a shift's delta): cos and sin exactly as
// oracle::rope_cos_sin, and each angle's absolute error when the engine
// computes angles in float (zero otherwise).
struct RopeAngles {
  std::vector<double> cos, sin, error;  // [D/2] each
  RopeAngles(int head_dim) : cos(size_t(head_dim / 2)), sin(cos.size()), error(cos.size()) {}
  void at(int position, double theta, bool in_float, double error_per_step);
};

// Angles in float, as llama.cpp computes them: the relative error per step
// of angle_i = pos * scale^i (see the definition).
double float_angle_error_per_step(double rope_theta, int head_dim);

// Rotate-half RoPE of one head, in place (oracle::rotate_half), with its
// variance; `single` is the unit roundoff of its products and sum.
//   head, var: [D].
void rope_var(double* head, double* var, const RopeAngles& angles, int dim,
              double single = kUnitRoundoff);

// What P6 compares for one token's computed K or V, and storage's rounding
// added to its variance in place (attention reads the stored value); also
// the rounding of q to K's type (bound null). computed (quantized only,
// else null): the bound before storage.
//   value, var, bound, computed: [KVH][D].
// pair_order: a quantized type's blocks of 32 are taken in adjacent-pair
// order (block_element).
void store_var(const double* value, double* var, double* bound, double* computed, int KVH, int D,
               const KvStorageError& storage, bool pair_order = false);

// The element of a head of D (even) at stored position j: j itself, or in
// adjacent-pair order j / 2 for even j and D / 2 + j / 2 for odd j
// (ArithmeticTraits::k_blocks_in_pair_order).
inline int block_element(int j, int D, bool pair_order) {
  if (!pair_order) return j;
  return j % 2 == 0 ? j / 2 : D / 2 + j / 2;
}

// One block of a head (stored positions first .. first + n - 1) gathered:
// its elements' indices into the head and their values and variances.
struct BlockGather {
  int n = 0;
  int index[32];
  double value[32], var[32];
  BlockGather(const double* head_value, const double* head_var, int first, int n_, int D,
              bool pair_order)
      : n(n_) {
    for (int i = 0; i < n; ++i) {
      index[i] = block_element(first + i, D, pair_order);
      value[i] = head_value[index[i]], var[i] = head_var[index[i]];
    }
  }
};

// One quantization block of exact values and their computed errors: the
// smallest and largest value, the largest magnitude, and the largest
// kConfidence-sigma error.   value, var: [n].
struct BlockRange {
  double min, max, amax, computed_max;
};
BlockRange block_range(const double* value, const double* var, int n);

// ggml's vec_dot of a K block with a stored minimum (q5_1: k~ = c d + m)
// and q in q8_1 blocks (q~ = c' d', and s' = fp16(d' sum c') stored):
// d d' sum(c c') + m s'. Against the dequantized dot sum k~ q~ (the
// per-element models of K and q) it differs by m (s' - fp16(d') sum c'),
// at most `sum`; the minimum's f16 rounding, one error shared by the
// block's elements, moves the dot by at most `min` (docs/TOLERANCE.md,
// "ggml's q5_1").   q, var_q, k, var_k: [n] exact values, variances.
struct BlockSumError {
  double sum = 0, min = 0;
};
BlockSumError q8_1_block_sum_error(const double* q, const double* var_q, const double* k,
                                   const double* var_k, int n);

// Scratch of attend_var, sized once per pass.
struct AttendScratch {
  std::vector<double> scores, p, var_sigma;  // [keys] one query head
  std::vector<double> o_var, o_magnitude;    // [D] one query head
  std::vector<double> o_spread;              // [D] sum p_j |v_jd - o_d|, one query head
};

// One query position's attention over exactly the n_keys keys given
// (oracle::attend's arithmetic), with the error variance of its output.
//   q_t, var_q_t: [H][D];  k, var_k, v, var_v: [n_keys][KVH][D];  att, var_att: [H][D].
void attend_var(const double* q_t, const double* var_q_t, const double* k, const double* var_k,
                const double* v, const double* var_v, int n_keys, int H, int KVH, int D,
                AttendScratch& s, double* att, double* var_att, const ArithmeticModel& m);

// Buffers of mlp_var.
struct MlpScratch {
  std::vector<double> h, var_h;        // [E] normed row
  std::vector<double> up, var_up;      // [F]
  std::vector<double> gate, var_gate;  // [F] llama
  std::vector<double> proj, var_proj;  // [E] the block's output
  MlpScratch(int E, int F);
};

// The feed-forward block of one position with its norm and residual add,
// values and variances in place.   xt, vxt: [E].
void mlp_var(bool gpt2, const LayerWeights& w, int E, int F, double eps, double* xt, double* vxt,
             MlpScratch& b, const ArithmeticModel& m);

}  // namespace kvcheck::tolerance
