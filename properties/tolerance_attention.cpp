// The error model of attention for one query position (docs/TOLERANCE.md,
// "Attention"): scores, softmax and the weighted sum of values, each with
// the variance it adds. Apart because it is the one kernel whose error
// couples positions (every key's error reaches the output through its
// weight), and the longest derivation; its values are oracle::attend's ops.
// The declared arithmetic adds what reduced-precision attention rounds:
// K/V as read, the scores and probabilities, flash attention's rescales
// and its running sum (docs/TOLERANCE.md, "Reduced-precision arithmetic").
#include <algorithm>
#include <cmath>
#include <span>

#include "oracle/ops.h"
#include "properties/tolerance.h"
#include "properties/tolerance_kernels.h"

namespace kvcheck::tolerance {

namespace {

// The variance of a stored K/V element as attention reads it: rounded once
// more where the engine reads the cache in a narrower type (kv_read).
double read_var(double value, double var, Rounding read) {
  if (read.none()) return var;
  return var * sq(1 + read.relative) + sq(read.of(value));
}

// A K type with a stored minimum read against q in q8_1 blocks (ggml's
// q5_1): each block's dot is d d' sum(c c') + m s', whose float roundings
// are relative to |k - min| |q| and |min| |q| rather than |k q| (abs_dot
// gets their sum), and whose block sum and shared minimum add one bounded
// error per block (q8_1_block_sum_error), in `var` scaled by scale^2.
void block_sum_terms(const double* qh, const double* vqh, const double* kj, const double* vkj,
                     int D, bool pair_order, double& abs_dot, double& var) {
  abs_dot = 0, var = 0;
  for (int first = 0; first < D; first += int(kQ8Block)) {
    const int n = std::min(D - first, int(kQ8Block));
    const BlockGather q(qh, vqh, first, n, D, pair_order), k(kj, vkj, first, n, D, pair_order);
    const double k_min = block_range(k.value, k.var, n).min;
    for (int i = 0; i < n; ++i) {
      abs_dot += (std::abs(k.value[i] - k_min) + std::abs(k_min)) * std::abs(q.value[i]);
    }
    const BlockSumError e = q8_1_block_sum_error(q.value, q.var, k.value, k.var, n);
    var += sq(e.sum + e.min);
  }
}

// Weight j of one query head is exp(s_j - max) (1 + sigma_j); var_sigma[j]
// gets sigma_j's variance. Score s_j = scale q.k_j: first-order variance
// scale^2 sum (k^2 var_q + q^2 var_k) plus the dot product's rounding (D
// terms, * scale, the float scale); then the float rounding of s_j - max and
// exp's own error (kept at its worst).
//   qh, vqh: [D];  k, var_k: [n_keys][KVH][D] read at KV head g;  scores: [n_keys].
void weight_var(const double* qh, const double* vqh, const double* k, const double* var_k,
                int n_keys, int KVH, int g, int D, const std::vector<double>& scores,
                std::vector<double>& var_sigma, const ArithmeticModel& m) {
  const double scale = 1.0 / std::sqrt(double(D));
  const double score_rounding = (D + 2) * m.sum * m.sum * scale * scale;
  const double exp_var = sq(kExpRelativeError);
  double max_score = -INFINITY;
  for (int j = 0; j < n_keys; ++j) max_score = std::max(max_score, scores[sz(j)]);
  for (int j = 0; j < n_keys; ++j) {
    const size_t kv_at = (sz(j) * sz(KVH) + sz(g)) * sz(D);
    const double* kj = k + kv_at;
    const double* vkj = var_k + kv_at;
    double abs_dot = 0, var = 0, block_var = 0;
    if (m.query_block_sums)
      block_sum_terms(qh, vqh, kj, vkj, D, m.k_pair_order, abs_dot, block_var);
    for (int d = 0; d < D; ++d) {
      if (!m.query_block_sums) abs_dot += std::abs(qh[d] * kj[d]);
      var += kj[d] * kj[d] * vqh[d] + qh[d] * qh[d] * read_var(kj[d], vkj[d], m.kv_read_k);
    }
    const double shifted = scores[sz(j)] - max_score;
    var_sigma[sz(j)] = scale * scale * (var + block_var) + score_rounding * abs_dot * abs_dot +
                       sq(u * shifted) + exp_var;
    // Narrower activations round the product q.k and its scaling: an
    // absolute error of a score is a relative one of its weight.
    if (!m.output.none()) var_sigma[sz(j)] += 2 * sq(m.output.of(scores[sz(j)]));
  }
}

// Probabilities quantized in blocks of keys (ggml's mul_mat of a quantized
// V converts them to its vec_dot_type): each within per_scale codes of its
// block's scale plus the absolute term, and a block's scale is at most the
// largest computed weight / levels. Blocks follow the engine's cells, which
// the bound does not know, so every weight takes the largest weight's
// scale; a computed weight is within kConfidence sigma of its value.
double probability_block_rounding(const KvStorageError& blocks, const AttendScratch& s) {
  if (blocks.per_scale == 0) return 0;
  double p_max = 0, sigma_max = 0;
  for (size_t j = 0; j < s.p.size(); ++j) {
    p_max = std::max(p_max, s.p[j]);
    sigma_max = std::max(sigma_max, s.var_sigma[j]);
  }
  const double computed_max = p_max * (1 + kConfidence * std::sqrt(sigma_max));
  return blocks.per_scale * computed_max / blocks.levels * (1 + u) + blocks.absolute;
}

// The variance the reduced-precision value sum adds to output element d of
// one head, per docs/TOLERANCE.md (probabilities rounded before the sum, no
// renormalization: sum_j (r p_j + a)^2 v_jd^2, is added in the key loop): flash
// attention's rescales (at most n - 1, each exp(old max - new max) off by
// U_exp, and the numerator's and denominator's products rounding: the
// output moves by that times sum p |v - o|, sum p |v| and |o|), its running sum rounded to a
// narrower type after every key and rescale (2n roundings of at most r m + a), and its final 1/S
// and product (one rounding more than the plain division).
double value_sum_extra(const ArithmeticModel& m, int n_keys, double magnitude, double spread,
                       double o) {
  double var = 0;
  if (m.online_softmax) {
    // The numerator's and the (f32) denominator's rescale products round too.
    var += (n_keys - 1) * (sq(kExpRelativeError * spread) + sq(m.sum * magnitude) + sq(u * o)) +
           sq(u * o);
  }
  if (!m.value_accumulation.none()) var += 2 * n_keys * sq(m.value_accumulation.of(magnitude));
  if (!m.output.none()) var += sq(m.output.of(o));
  return var;
}

}  // namespace

// o = sum p_j v_j; first order do = sum p_j dv_j + sum p_j sigma_j (v_j - o)
// (a shift common to all sigma_j cancels); then the float sums (n_keys terms
// each) and the division.
void attend_var(const double* q_t, const double* var_q_t, const double* k, const double* var_k,
                const double* v, const double* var_v, int n_keys, int H, int KVH, int D,
                AttendScratch& s, double* att, double* var_att, const ArithmeticModel& m) {
  const size_t keys_size = sz(n_keys) * sz(KVH) * sz(D);
  const std::span<const double> keys(k, keys_size), values(v, keys_size);  // [n_keys][KVH][D]
  const double sum_rounding = n_keys * m.sum * m.sum;
  s.scores.resize(sz(n_keys)), s.p.resize(sz(n_keys)), s.var_sigma.resize(sz(n_keys));
  s.o_var.resize(sz(D)), s.o_magnitude.resize(sz(D)), s.o_spread.resize(sz(D));
  for (int hq = 0; hq < H; ++hq) {
    const int g = oracle::kv_head_of(hq, H, KVH);
    const double* qh = q_t + sz(hq) * sz(D);
    oracle::attention_scores(std::span<const double>(qh, sz(D)), keys, KVH, g, s.scores);
    weight_var(qh, var_q_t + sz(hq) * sz(D), k, var_k, n_keys, KVH, g, D, s.scores, s.var_sigma, m);
    oracle::softmax(s.scores, s.p);
    const double block_rounding = probability_block_rounding(m.probability_blocks, s);
    double* o = att + sz(hq) * sz(D);
    oracle::weighted_sum(s.p, values, KVH, g, std::span<double>(o, sz(D)));
    std::fill(s.o_var.begin(), s.o_var.end(), 0.0);
    std::fill(s.o_magnitude.begin(), s.o_magnitude.end(), 0.0);
    std::fill(s.o_spread.begin(), s.o_spread.end(), 0.0);
    // The key loop is outside so the rows of v are read contiguously.
    for (int j = 0; j < n_keys; ++j) {
      const double pj = s.p[sz(j)], sigma = s.var_sigma[sz(j)];
      const double rp = sq(m.probabilities.of(pj) + block_rounding);
      const size_t at = (sz(j) * sz(KVH) + sz(g)) * sz(D);
      const double* vj = v + at;
      const double* vvj = var_v + at;
      for (int d = 0; d < D; ++d) {
        s.o_var[sz(d)] +=
            pj * pj * (read_var(vj[d], vvj[d], m.kv_read_v) + sigma * sq(vj[d] - o[d])) +
            rp * vj[d] * vj[d];
        s.o_magnitude[sz(d)] += pj * std::abs(vj[d]);
        s.o_spread[sz(d)] += pj * std::abs(vj[d] - o[d]);
      }
    }
    double* var_o = var_att + sz(hq) * sz(D);
    for (int d = 0; d < D; ++d) {
      var_o[d] =
          s.o_var[sz(d)] + sum_rounding * sq(s.o_magnitude[sz(d)] + std::abs(o[d])) + sq(u * o[d]);
      var_o[d] += value_sum_extra(m, n_keys, s.o_magnitude[sz(d)], s.o_spread[sz(d)], o[d]);
    }
  }
}

}  // namespace kvcheck::tolerance
