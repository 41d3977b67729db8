// The reduced-precision attention bounds (docs/TOLERANCE.md, "Reduced-
// precision arithmetic") held against simulations of the arithmetic they
// model, written here from the description of ggml's CPU kernels (read in
// llama.cpp's bundled source, not copied): the f16 cache without flash
// attention (q and the probabilities rounded to f16), flash attention's
// online softmax with an f16 running sum, q8_0 by ggml's quantizer (f16
// scale, codes from the unrounded one) with q quantized too. Each bound
// must hold on every random trial. The f32 model (storage rounding only)
// fails flash attention's f16 sum by far; for the other two paths the new
// terms add at most as much variance as the storage term already counts at
// its worst, and the f32 model happens to hold on these trials (printed):
// they are derived because a bound covers every rounding, not because a
// test failed without them. The real engines: docs/LLAMA_CPP.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "engine/arithmetic_presets.h"
#include "engine/kv_dtype.h"
#include "model/rng.h"
#include "properties/tolerance.h"
#include "properties/tolerance_kernels.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

using tolerance::ArithmeticModel;

float f16(double x) {
  return f16_to_float(float_to_f16(float(x)));
}

float bf16(double x) {
  return bf16_to_float(float_to_bf16(float(x)));
}

// ggml's q8_0 of one block: d = amax / 127 in float, an f16 scale stored,
// codes round(x * (1 / d)) (ties away from zero); read code * scale.
void ggml_q8_block(const float* x, int n, float* out, float* stored_scale = nullptr) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const float s = f16(d);
  for (int i = 0; i < n; ++i) out[i] = std::round(x[i] * id) * s;
  if (stored_scale != nullptr) *stored_scale = s;
}

// ggml's q5_1 of one block (quantize_row_q5_1_ref): min and max of the
// block, d = (max - min) / 31 in float, codes (x - min) * (1 / d) + 0.5
// truncated, an f16 scale and an f16 minimum stored; read code * scale +
// minimum in float (dequantize_row_q5_1).
struct Q5_1Block {
  int code[32] = {};
  float scale = 0, min = 0, computed_min = 0;
  float read(int i) const { return float(code[i]) * scale + min; }
};
Q5_1Block ggml_q5_1_block(const float* x, int n) {
  float min = INFINITY, max = -INFINITY;
  for (int i = 0; i < n; ++i) min = std::min(min, x[i]), max = std::max(max, x[i]);
  const float d = (max - min) / 31, id = d != 0 ? 1.0f / d : 0.0f;
  Q5_1Block b;
  b.scale = f16(d), b.min = f16(min), b.computed_min = min;
  for (int i = 0; i < n; ++i) b.code[i] = int(static_cast<uint8_t>((x[i] - min) * id + 0.5f));
  return b;
}

// ggml's q8_1 of one block (quantize_row_q8_1_ref): q8_0's codes and f16
// scale, and the stored sum fp16(d * sum of codes), d the unrounded scale.
struct Q8_1Block {
  int code[32] = {};
  float scale = 0, sum = 0;
};
Q8_1Block ggml_q8_1_block(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
  Q8_1Block b;
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += b.code[i] = int(std::round(x[i] * id));
  b.scale = f16(d), b.sum = f16(float(sum) * d);
  return b;
}

// ggml_vec_dot_q5_1_q8_1 of one block pair, in float as its generic path:
// (d d') * sum(c c') + m s'.
float ggml_q5_1_dot(const Q5_1Block& k, const Q8_1Block& q, int n) {
  int sumi = 0;
  for (int i = 0; i < n; ++i) sumi += k.code[i] * q.code[i];
  return (k.scale * q.scale) * float(sumi) + k.min * q.sum;
}

// A stored row of D: f16, bf16, or ggml's q8_0 in blocks of 32.
enum class Stored { kF16, kBF16, kQ8 };
std::vector<float> store(const std::vector<double>& x, Stored type) {
  std::vector<float> out(x.size());
  std::vector<float> in(x.begin(), x.end());
  if (type != Stored::kQ8) {
    for (size_t i = 0; i < x.size(); ++i) out[i] = type == Stored::kF16 ? f16(x[i]) : bf16(x[i]);
    return out;
  }
  for (size_t b = 0; b < x.size(); b += 32) {
    ggml_q8_block(in.data() + b, int(std::min<size_t>(32, x.size() - b)), out.data() + b);
  }
  return out;
}

float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

struct Trial {
  int n = 0, D = 0;
  std::vector<double> q, k, v;  // [D], [n][D], [n][D] exact
};

// ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query head:
// online softmax; V in f16 sums into an f16 accumulator (every update and
// rescale rounded), a q8_0 V is dequantized and summed in f32.
// dots (optional, [n]): each key's q.k as K's vec_dot computes it (q5_1).
std::vector<double> ggml_flash(const Trial& t, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               bool f16_sum, const std::vector<float>* dots = nullptr) {
  const float scale = 1.0f / std::sqrt(float(t.D));
  std::vector<float> acc(size_t(t.D), 0.0f);
  float S = 0, M = -INFINITY;
  for (int j = 0; j < t.n; ++j) {
    const float s =
        (dots != nullptr ? (*dots)[size_t(j)] : dot(q.data(), &k[size_t(j * t.D)], t.D)) * scale;
    float ms = 1, vs = 1;
    if (s > M) {
      const float old = M;
      M = s;
      ms = std::exp(old - M);
      for (float& a : acc) a = f16_sum ? f16(a * ms) : a * ms;
    } else {
      vs = std::exp(s - M);
    }
    for (int d = 0; d < t.D; ++d) {
      const float updated = std::fma(v[size_t(j * t.D + d)], vs, acc[size_t(d)]);
      acc[size_t(d)] = f16_sum ? f16(updated) : updated;
    }
    S = S * ms + vs;
  }
  std::vector<double> out(size_t(t.D));
  const float inv = 1.0f / S;
  for (int d = 0; d < t.D; ++d) out[size_t(d)] = acc[size_t(d)] * inv;
  return out;
}

// ggml's attention without flash attention over an f16 (bf16) cache: q in
// K's type dot K in f32, soft_max in f32 (its sum in double), the
// probabilities converted to V's type for the product with V, summed in f32.
std::vector<double> ggml_plain(const Trial& t, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               Stored p_type = Stored::kF16) {
  const float scale = 1.0f / std::sqrt(float(t.D));
  std::vector<float> s(size_t(t.n));
  for (int j = 0; j < t.n; ++j) s[size_t(j)] = dot(q.data(), &k[size_t(j * t.D)], t.D) * scale;
  const float max = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (float& x : s) sum += (x = std::exp(x - max));
  const float inv = float(1.0 / sum);
  std::vector<float> p(size_t(t.n));  // converted to V's vec_dot_type
  for (int j = 0; j < t.n; ++j) p[size_t(j)] = s[size_t(j)] * inv;
  if (p_type == Stored::kQ8) {
    for (int b = 0; b < t.n; b += 32) {
      ggml_q8_block(&p[size_t(b)], std::min(32, t.n - b), &p[size_t(b)]);
    }
  } else {
    for (float& x : p) x = p_type == Stored::kF16 ? f16(x) : bf16(x);
  }
  std::vector<double> out(size_t(t.D));
  for (int d = 0; d < t.D; ++d) {
    float o = 0;
    for (int j = 0; j < t.n; ++j) o = std::fma(p[size_t(j)], v[size_t(j * t.D + d)], o);
    out[size_t(d)] = o;
  }
  return out;
}

// key_offset: keys far from 0 too (up to that many times their spread, in
// half of the trials), where a K type with a stored minimum differs most.
Trial draw(SplitMix64& rng, int key_offset = 0) {
  Trial t;
  t.D = 32 << rng.in_range(0, 2);
  t.n = int(rng.in_range(1, 300));
  const double k_scale = std::ldexp(1.0, int(rng.in_range(-3, 3)));  // sharp or flat scores
  const double v_offset = rng.in_range(0, 1) ? 0.0 : 5.0;            // values far from 0
  const double k_offset =
      key_offset > 0 ? k_scale * double(rng.in_range(-key_offset, key_offset)) : 0;
  t.q.resize(size_t(t.D)), t.k.resize(size_t(t.n * t.D)), t.v.resize(t.k.size());
  for (double& x : t.q) x = rng.symmetric_unit();
  for (double& x : t.k) x = k_offset + k_scale * rng.symmetric_unit();
  for (double& x : t.v) x = v_offset + rng.symmetric_unit();
  return t;
}

// The worst |simulated - exact| / (kConfidence sqrt(var)) of one trial
// under `arithmetic`, the exact inputs rounded as the cache stores them
// (K in `dtype`, V in its own type where `arithmetic` declares one).
double worst_ratio(const Trial& t, const ArithmeticTraits& arithmetic, KvDtype dtype,
                   const std::vector<double>& simulated) {
  const ArithmeticModel m = tolerance::arithmetic_model(arithmetic, dtype);
  std::vector<double> k = t.k, v = t.v, q = t.q;
  std::vector<double> var_k(k.size()), var_v(v.size()), var_q(q.size());
  tolerance::store_var(k.data(), var_k.data(), nullptr, nullptr, t.n, t.D, m.storage_k);
  tolerance::store_var(v.data(), var_v.data(), nullptr, nullptr, t.n, t.D, m.storage_v);
  if (m.round_queries) {
    tolerance::store_var(q.data(), var_q.data(), nullptr, nullptr, 1, t.D, m.query);
  }
  tolerance::AttendScratch scratch;
  std::vector<double> att(size_t(t.D)), var_att(size_t(t.D));
  tolerance::attend_var(q.data(), var_q.data(), k.data(), var_k.data(), v.data(), var_v.data(), t.n,
                        1, 1, t.D, scratch, att.data(), var_att.data(), m);
  double worst = 0;
  for (int d = 0; d < t.D; ++d) {
    const double err = std::abs(simulated[size_t(d)] - att[size_t(d)]);
    worst = std::max(worst, err / (kConfidence * std::sqrt(var_att[size_t(d)])));
  }
  return worst;
}

struct Outcome {
  double derived = 0, f32_model = 0;
};

// Runs `trials` random trials of one ggml path and returns the worst ratio
// under its preset and under the f32 model with the same storage.
template <class Simulate>
Outcome run(const ArithmeticTraits& arithmetic, KvDtype dtype, int trials, Simulate simulate,
            int key_offset = 0) {
  SplitMix64 rng(20261203);
  ArithmeticTraits f32_storage;
  f32_storage.kv_quantizer = arithmetic.kv_quantizer;
  f32_storage.v_dtype = arithmetic.v_dtype;
  Outcome out;
  for (int i = 0; i < trials; ++i) {
    const Trial t = draw(rng, key_offset);
    const std::vector<double> got = simulate(t);
    out.derived = std::max(out.derived, worst_ratio(t, arithmetic, dtype, got));
    out.f32_model = std::max(out.f32_model, worst_ratio(t, f32_storage, dtype, got));
  }
  return out;
}

template <class Simulate>
Outcome run(const char* preset, KvDtype dtype, int trials, Simulate simulate, int key_offset = 0) {
  return run(*find_arithmetic_preset(preset), dtype, trials, simulate, key_offset);
}

TEST(ReducedPrecisionAttention, FlashAttentionWithAnF16SumIsWithinItsBound) {
  const Outcome o = run("ggml-flash-f16", KvDtype::kF16, 400, [](const Trial& t) {
    return ggml_flash(t, store(t.q, Stored::kF16), store(t.k, Stored::kF16),
                      store(t.v, Stored::kF16), true);
  });
  EXPECT_LE(o.derived, 1.0);
  EXPECT_GT(o.f32_model, 1.0) << "the f16 sum's terms are not needed on these trials";
  std::printf("flash f16: worst %.3f of the derived bound, %.3f of the f32 model's\n", o.derived,
              o.f32_model);
}

TEST(ReducedPrecisionAttention, F16CacheWithoutFlashAttentionIsWithinItsBound) {
  const Outcome o = run("ggml-f16", KvDtype::kF16, 400, [](const Trial& t) {
    return ggml_plain(t, store(t.q, Stored::kF16), store(t.k, Stored::kF16),
                      store(t.v, Stored::kF16));
  });
  EXPECT_LE(o.derived, 1.0);
  std::printf("f16 plain: worst %.3f of the derived bound, %.3f of the f32 model's\n", o.derived,
              o.f32_model);
}

TEST(ReducedPrecisionAttention, GgmlQ8_0FlashAttentionIsWithinItsBound) {
  const Outcome o = run("ggml-flash-q8_0", KvDtype::kQ8_0, 400, [](const Trial& t) {
    return ggml_flash(t, store(t.q, Stored::kQ8), store(t.k, Stored::kQ8), store(t.v, Stored::kQ8),
                      false);
  });
  EXPECT_LE(o.derived, 1.0);
  std::printf("flash q8_0: worst %.3f of the derived bound, %.3f of the f32 model's\n", o.derived,
              o.f32_model);
}

// llama.cpp's bf16 cache: with flash attention q is rounded to bf16 (K's
// vec_dot_type) and a bf16 V is widened to f32 and summed in f32 (VKQ32:
// only an f16 V has the f16 sum); without it, q and the probabilities are
// rounded to bf16 for mul_mat ("ggml-f16"'s fields, the cache's type).
TEST(ReducedPrecisionAttention, Bf16CacheIsWithinItsBoundWithAndWithoutFlashAttention) {
  const Outcome flash = run("ggml-flash-bf16", KvDtype::kBF16, 400, [](const Trial& t) {
    return ggml_flash(t, store(t.q, Stored::kBF16), store(t.k, Stored::kBF16),
                      store(t.v, Stored::kBF16), false);
  });
  const Outcome plain = run("ggml-f16", KvDtype::kBF16, 400, [](const Trial& t) {
    return ggml_plain(t, store(t.q, Stored::kBF16), store(t.k, Stored::kBF16),
                      store(t.v, Stored::kBF16), Stored::kBF16);
  });
  EXPECT_LE(flash.derived, 1.0);
  EXPECT_LE(plain.derived, 1.0);
  std::printf("bf16 flash: worst %.3f of the derived bound, %.3f of the f32 model's\n",
              flash.derived, flash.f32_model);
  std::printf("bf16 plain: worst %.3f of the derived bound, %.3f of the f32 model's\n",
              plain.derived, plain.f32_model);
}

// Different K and V types (llama.cpp's type_k and type_v): the scenario's
// kv_dtype is K's, arithmetic.v_dtype V's. K q8_0 with an f16 V (q
// quantized to q8_0, the f16 running sum of an f16 V), and K f16 with a
// q8_0 V (q rounded to f16, V widened and summed in f32), both under flash
// attention. Each must hold, and the second must fail when V is taken to
// be stored as K (the model before K and V had types of their own).
TEST(ReducedPrecisionAttention, DifferentKAndVTypesAreEachWithinTheirOwnBound) {
  ArithmeticTraits k_q8 = *find_arithmetic_preset("ggml-flash-q8_0");
  k_q8.v_dtype = KvDtype::kF16;
  k_q8.value_accumulation = Precision::kF16;
  const Outcome q8_f16 = run(k_q8, KvDtype::kQ8_0, 400, [](const Trial& t) {
    return ggml_flash(t, store(t.q, Stored::kQ8), store(t.k, Stored::kQ8), store(t.v, Stored::kF16),
                      true);
  });
  const ArithmeticTraits v_q8 = *find_arithmetic_preset("ggml-flash-v-q8_0");
  const auto f16_q8 = [](const Trial& t) {
    return ggml_flash(t, store(t.q, Stored::kF16), store(t.k, Stored::kF16),
                      store(t.v, Stored::kQ8), false);
  };
  const Outcome f16_q8_own = run(v_q8, KvDtype::kF16, 400, f16_q8);
  ArithmeticTraits v_as_k = v_q8;
  v_as_k.v_dtype.reset();
  const Outcome f16_q8_as_k = run(v_as_k, KvDtype::kF16, 400, f16_q8);
  EXPECT_LE(q8_f16.derived, 1.0);
  EXPECT_LE(f16_q8_own.derived, 1.0);
  EXPECT_GT(f16_q8_as_k.derived, 1.0) << "V stored as K's type covers a q8_0 V";
  std::printf("K q8_0, V f16: worst %.3f; K f16, V q8_0: %.3f (V taken as f16: %.3f)\n",
              q8_f16.derived, f16_q8_own.derived, f16_q8_as_k.derived);
}

// P6's bounds: K in the cache's type, V in its own. With an f32 K and a
// bf16 V, layer 0's K bound is the f32 one bit for bit and every V bound
// holds bf16's storage rounding; a q8_0 K with an f16 V has q8_0's
// pre-storage bound for K only (P6 checks K's stored scales, not V's).
TEST(ReducedPrecisionAttention, KAndVEachGetTheirOwnStorageBound) {
  const Config config = small_config(Family::kLlama, 2, 4, 2);
  const Weights weights = init_weights(config, 5);
  const std::vector<int32_t> tokens = token_table(9, {12}, config.vocab)[0];
  ArithmeticTraits v_bf16;
  v_bf16.v_dtype = KvDtype::kBF16;
  oracle::Output exact;
  const ErrorBounds f32 = derive_error_bounds(config, weights, tokens, KvDtype::kF32);
  const ErrorBounds own =
      derive_error_bounds(config, weights, tokens, KvDtype::kF32, v_bf16, &exact);
  const size_t layer0 = f32.k.size() / size_t(config.n_layers);
  for (size_t i = 0; i < own.v.size(); ++i) {
    ASSERT_GE(own.v[i], 0x1p-8 * std::abs(exact.v[i])) << i;
    if (i < layer0) {
      ASSERT_EQ(own.k[i], f32.k[i]) << i;
    }
  }
  EXPECT_GT(own.logits[0], f32.logits[0]);  // the bf16 V reaches the logits
  ArithmeticTraits v_f16;
  v_f16.v_dtype = KvDtype::kF16;
  const ErrorBounds q8 = derive_error_bounds(config, weights, tokens, KvDtype::kQ8_0, v_f16);
  EXPECT_EQ(q8.k_computed.size(), q8.k.size());
  EXPECT_TRUE(q8.v_computed.empty());
}

// ggml's mul_mat of a q8_0 V quantizes the probabilities to q8_0 blocks
// (llama.cpp needs flash attention for a quantized V, so only a declared
// arithmetic runs this: the kill matrix of the in-tree q8_0 cache under
// "ggml-f16").
TEST(ReducedPrecisionAttention, ProbabilitiesQuantizedForAQ8_0VAreWithinTheirBound) {
  ArithmeticTraits a = *find_arithmetic_preset("ggml-f16");
  a.kv_quantizer = KvQuantizer::kGgml;
  const Outcome o = run(a, KvDtype::kQ8_0, 400, [](const Trial& t) {
    return ggml_plain(t, store(t.q, Stored::kQ8), store(t.k, Stored::kQ8), store(t.v, Stored::kQ8),
                      Stored::kQ8);
  });
  EXPECT_LE(o.derived, 1.0);
  std::printf("q8_0 plain, p quantized: worst %.3f of the derived bound, %.3f of the f32 model's\n",
              o.derived, o.f32_model);
}

// Per element, ggml's q8_0 lies within d (1/2 + 2^-16 + 127 2^-11) + 127
// 2^-25 of its value (d the unrounded scale, at most the largest scale a
// correct engine computes), and beyond kvcheck's half code of the stored
// scale: the finding of docs/findings/llama_cpp_q8_0_f16_scale.md.
TEST(ReducedPrecisionAttention, GgmlQ8_0ElementsAreWithinTheirStorageBound) {
  SplitMix64 rng(7);
  double worst_ggml = 0, worst_kvcheck = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const double magnitude =
        std::ldexp(1.0, int(rng.in_range(-22, 4)));  // subnormal f16 scales too
    float x[32], out[32], s = 0;
    for (float& e : x) e = float(magnitude * rng.symmetric_unit());
    ggml_q8_block(x, 32, out, &s);
    double amax = 0;
    for (float e : x) amax = std::max(amax, std::abs(double(e)));
    const KvStorageError ggml = kv_storage_error(KvDtype::kQ8_0, KvQuantizer::kGgml);
    const double bound = ggml.per_scale * amax / 127 * (1 + kUnitRoundoff) + ggml.absolute;
    for (int i = 0; i < 32; ++i) {
      const double err = std::abs(double(out[i]) - x[i]);
      worst_ggml = std::max(worst_ggml, err / bound);
      worst_ggml = std::max(worst_ggml, err / q8_element_bound(0, s, KvQuantizer::kGgml));
      if (s > 0) worst_kvcheck = std::max(worst_kvcheck, err / q8_element_bound(0, s));
    }
  }
  EXPECT_LE(worst_ggml, 1.0);
  EXPECT_GT(worst_kvcheck, 1.0);  // and a zero (underflowed) scale: any element is off
  std::printf("ggml q8_0 elements: worst %.4f of ggml's bound, %.4f of kvcheck's half code\n",
              worst_ggml, worst_kvcheck);
}

// ggml's q4_0 and q5_0 of random blocks (quantize_row_q4_0_ref,
// quantize_row_q5_0_ref): with L = 8 (q4_0) or 16 (q5_0) levels, d = (the
// signed largest element) / -L, codes min(2L - 1, (int8)(x / d + L + 0.5)),
// read as (code - L) * fp16(d). Half of the blocks hold the largest element
// and one of the other sign at `other` of it, so the clamp at 2L - 1 acts.
// The worst error / bound of all elements and of the clamped ones.
struct SignedBlocks {
  double worst = 0, worst_clamped = 0;
};
SignedBlocks ggml_signed_blocks(KvDtype dtype, uint64_t seed, double other) {
  const KvStorageError e = kv_storage_error(dtype, KvQuantizer::kGgml);
  const float levels = float(e.levels);
  SplitMix64 rng(seed);
  SignedBlocks out;
  for (int trial = 0; trial < 20000; ++trial) {
    const double magnitude = std::ldexp(1.0, int(rng.in_range(-22, 4)));
    float x[32];
    for (float& v : x) v = float(magnitude * rng.symmetric_unit());
    if (trial % 2 == 0) {
      x[0] = float(magnitude);
      x[int(rng.in_range(1, 31))] = float(-other * magnitude);
    }
    float amax = 0, max = 0;
    for (float v : x) {
      if (amax < std::fabs(v)) amax = std::fabs(v), max = v;
    }
    const float d = max / -levels, id = d != 0 ? 1.0f / d : 0.0f, s = f16(d);
    const double bound = e.per_scale * amax / e.levels * (1 + kUnitRoundoff) + e.absolute;
    const int top = 2 * int(levels) - 1;
    const float offset = levels + 0.5f;  // 8.5f, 16.5f: one rounding, as ggml's
    for (float v : x) {
      const int code = std::min(top, int(static_cast<int8_t>(v * id + offset)));
      const double err = std::abs(double((float(code) - levels) * s) - v);
      out.worst = std::max(out.worst, err / bound);
      if (code == top) out.worst_clamped = std::max(out.worst_clamped, err / bound);
    }
  }
  return out;
}

// q4_0 within d (1 + 2^-16 + 8 2^-11) + 8 2^-25, q5_0 within d (1 + 2^-16
// + 16 2^-11) + 16 2^-25: half a code, but a whole one where the clamp acts
// (an element of the other sign near amax), which the test must reach.
TEST(ReducedPrecisionAttention, GgmlQ4_0AndQ5_0ElementsAreWithinTheirStorageBound) {
  for (const auto& [dtype, seed, other] :
       {std::tuple{KvDtype::kQ4_0, 11, 0.97}, std::tuple{KvDtype::kQ5_0, 13, 0.99}}) {
    const SignedBlocks r = ggml_signed_blocks(dtype, uint64_t(seed), other);
    EXPECT_LE(r.worst, 1.0) << kv_dtype_name(dtype);
    EXPECT_GT(r.worst_clamped, 0.5) << kv_dtype_name(dtype) << ": the clamp was never reached";
    std::printf("ggml %s elements: worst %.4f of the bound (clamped codes %.4f)\n",
                kv_dtype_name(dtype), r.worst, r.worst_clamped);
  }
}

// Random blocks for q5_1: magnitudes 2^-22 .. 2^4 (subnormal f16 scales
// too), half of them offset from 0 by up to 64 times their spread, where
// the stored minimum's own f16 rounding is the largest error.
std::vector<float> q5_1_test_block(SplitMix64& rng, int trial) {
  const double magnitude = std::ldexp(1.0, int(rng.in_range(-22, 4)));
  const double offset = trial % 2 == 0 ? magnitude * double(rng.in_range(-64, 64)) : 0.0;
  std::vector<float> x(32);
  for (float& e : x) e = float(offset + magnitude * rng.symmetric_unit());
  return x;
}

// Per element, ggml's q5_1 lies within d (1/2 + 2^-16 + 31 2^-11) + 2^-11
// |min| + 32 2^-25 + u |read| of its value, d = range / 31 (store_var's
// bound). Without the minimum's term it fails on the offset blocks.
TEST(ReducedPrecisionAttention, GgmlQ5_1ElementsAreWithinTheirStorageBound) {
  const KvStorageError e = kv_storage_error(KvDtype::kQ5_1, KvQuantizer::kGgml);
  SplitMix64 rng(17);
  double worst = 0, worst_without_min = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::vector<float> x = q5_1_test_block(rng, trial);
    const Q5_1Block b = ggml_q5_1_block(x.data(), 32);
    std::vector<double> value(x.begin(), x.end()), var(32, 0.0), bound(32);
    tolerance::store_var(value.data(), var.data(), bound.data(), nullptr, 1, 32, e);
    const tolerance::BlockRange r = tolerance::block_range(value.data(), var.data(), 32);
    for (int i = 0; i < 32; ++i) {
      const double err = std::abs(double(b.read(i)) - value[size_t(i)]);
      worst = std::max(worst, err / bound[size_t(i)]);
      const double without_min = bound[size_t(i)] - e.min_relative * std::abs(r.min);
      worst_without_min = std::max(worst_without_min, err / without_min);
    }
  }
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(worst_without_min, 1.0) << "the stored minimum's rounding is not needed";
  std::printf("ggml q5_1 elements: worst %.4f of the bound, %.4f without the minimum's term\n",
              worst, worst_without_min);
}

// vec_dot_q5_1_q8_1 differs from the dot of the dequantized blocks (the
// per-element models of K and q) by the stored block sum's error and from
// the dot with the block's exact minimum by the minimum's rounding: both
// within q8_1_block_sum_error, and far beyond the float rounding of a
// 32-term dot (kConfidence sqrt(34) u sum |k q|) that would otherwise be
// all the bound allows for them. vec_dot's own products and sums are
// taken exactly here, to isolate its stored values; the float ones are the
// attention test's (ggml_q5_1_dot).
TEST(ReducedPrecisionAttention, GgmlQ5_1DotWithQ8_1IsWithinItsBlockSumTerms) {
  SplitMix64 rng(19);
  double worst_sum = 0, worst = 0, worst_as_rounding = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::vector<float> kx = q5_1_test_block(rng, trial);
    std::vector<float> qx(32);
    for (float& e : qx) e = float(rng.symmetric_unit() + (trial % 4 < 2 ? 0.5 : 0.0));
    const Q5_1Block k = ggml_q5_1_block(kx.data(), 32);
    const Q8_1Block q = ggml_q8_1_block(qx.data(), 32);
    // read_rounding: k.read's own float rounding (u |read| each), K's
    // storage term, which the dequantized dot carries and vec_dot does not.
    double sumi = 0, dequantized = 0, exact_min = 0, abs_dot = 0, read_rounding = 0;
    for (int i = 0; i < 32; ++i) {
      const double qi = double(q.code[i]) * q.scale;
      sumi += double(k.code[i]) * q.code[i];
      dequantized += double(k.read(i)) * qi;  // k.read rounds as dequantize_row_q5_1
      read_rounding += kUnitRoundoff / (1 - kUnitRoundoff) * std::abs(double(k.read(i)) * qi);
      exact_min += (double(k.code[i]) * k.scale + k.computed_min) * qi;
      abs_dot += std::abs(double(kx[size_t(i)]) * qx[size_t(i)]);
    }
    const double vec_dot = double(k.scale) * q.scale * sumi + double(k.min) * q.sum;
    std::vector<double> kv(kx.begin(), kx.end()), qv(qx.begin(), qx.end()), zero(32, 0.0);
    const tolerance::BlockSumError e =
        tolerance::q8_1_block_sum_error(qv.data(), zero.data(), kv.data(), zero.data(), 32);
    worst_sum = std::max(worst_sum, (std::abs(vec_dot - dequantized) - read_rounding) / e.sum);
    worst = std::max(worst, std::abs(vec_dot - exact_min) / (e.sum + e.min));
    const double rounding = kConfidence * std::sqrt(34.0) * kUnitRoundoff * abs_dot;
    if (abs_dot > 0)
      worst_as_rounding = std::max(worst_as_rounding, std::abs(vec_dot - dequantized) / rounding);
  }
  EXPECT_LE(worst_sum, 1.0);
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(worst_as_rounding, 1.0) << "the block sum's error is within a dot's float rounding";
  std::printf(
      "q5_1 . q8_1: block sum %.4f of its term, with the minimum %.4f; %.1f x a dot's "
      "rounding\n",
      worst_sum, worst, worst_as_rounding);
}

// llama.cpp's q5_1 cache under flash attention: q quantized to q8_1 and
// each score by vec_dot_q5_1_q8_1, V dequantized to f32 and summed in f32
// (q5_1's mode declares ggml-flash-q8_0's fields), keys far from 0 too.
TEST(ReducedPrecisionAttention, GgmlQ5_1FlashAttentionIsWithinItsBound) {
  const Outcome o = run(
      "ggml-flash-q8_0", KvDtype::kQ5_1, 400,
      [](const Trial& t) {
        std::vector<float> qf(t.q.begin(), t.q.end()), kf(t.k.begin(), t.k.end());
        std::vector<float> vf(t.v.begin(), t.v.end()), k(kf.size()), v(vf.size());
        std::vector<float> dots(size_t(t.n), 0.0f);
        for (int j = 0; j < t.n; ++j) {
          for (int b = 0; b < t.D; b += 32) {
            const size_t at = size_t(j * t.D + b);
            const Q5_1Block kb = ggml_q5_1_block(&kf[at], 32), vb = ggml_q5_1_block(&vf[at], 32);
            dots[size_t(j)] += ggml_q5_1_dot(kb, ggml_q8_1_block(&qf[size_t(b)], 32), 32);
            for (int i = 0; i < 32; ++i)
              k[at + size_t(i)] = kb.read(i), v[at + size_t(i)] = vb.read(i);
          }
        }
        return ggml_flash(t, qf, k, v, false, &dots);
      },
      8);
  EXPECT_LE(o.derived, 1.0);
  std::printf("flash q5_1: worst %.3f of the derived bound, %.3f of the f32 model's\n", o.derived,
              o.f32_model);
}

// llama.cpp quantizes a llama head of K (and q) in the GGUF's adjacent-pair
// order: blocks of 32 hold elements i and D/2 + i together. A head whose
// halves differ in size (1e-3 and 1 here) then has the small elements
// quantized with the large ones' scale: within store_var's bound in pair
// order, far outside it in kvcheck's order (the P6 failure of a q8_0
// campaign at head_dim 96 before k_blocks_in_pair_order).
TEST(ReducedPrecisionAttention, PairOrderBlocksAreWithinTheirStorageBound) {
  const KvStorageError e = kv_storage_error(KvDtype::kQ8_0, KvQuantizer::kGgml);
  SplitMix64 rng(23);
  double worst_pair = 0, worst_own = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int D = 64 << rng.in_range(0, 1);
    const size_t n = size_t(D);
    std::vector<double> x(n), var(n, 0.0), pair(n), own(n);
    for (int i = 0; i < D; ++i) x[size_t(i)] = (i < D / 2 ? 1e-3 : 1.0) * rng.symmetric_unit();
    std::vector<float> stored(n), in(n), out(n);
    for (int j = 0; j < D; ++j)
      in[size_t(j)] = float(x[size_t(tolerance::block_element(j, D, true))]);
    for (int b = 0; b < D; b += 32) ggml_q8_block(&in[size_t(b)], 32, &out[size_t(b)]);
    for (int j = 0; j < D; ++j)
      stored[size_t(tolerance::block_element(j, D, true))] = out[size_t(j)];
    tolerance::store_var(x.data(), var.data(), pair.data(), nullptr, 1, D, e, true);
    std::fill(var.begin(), var.end(), 0.0);
    tolerance::store_var(x.data(), var.data(), own.data(), nullptr, 1, D, e, false);
    for (int i = 0; i < D; ++i) {
      const double err = std::abs(double(stored[size_t(i)]) - x[size_t(i)]);
      worst_pair = std::max(worst_pair, err / pair[size_t(i)]);
      worst_own = std::max(worst_own, err / own[size_t(i)]);
    }
  }
  EXPECT_LE(worst_pair, 1.0);
  EXPECT_GT(worst_own, 1.0) << "blocks in kvcheck's order cover the pair order";
  std::printf(
      "pair-order q8_0 heads: worst %.4f of the pair-order bound, %.1f of kvcheck's order\n",
      worst_pair, worst_own);
}

}  // namespace
}  // namespace kvcheck::test
