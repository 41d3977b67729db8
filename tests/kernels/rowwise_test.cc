// The row-wise kernels on every Highway target: RMSNorm and LayerNorm within
// their derived bounds, exp/tanh within their documented ulps, the
// activations within theirs, special values as the scalar reference gives
// them, and an element's bits independent of where it sits in the row.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/kernels.h"
#include "engine/kv_dtype.h"
#include "hwy/targets.h"
#include "tests/kernels/kernel_checks.h"

namespace kvcheck::cpu {
namespace {

// ---------------------------------------------------------------------------
// Norms

// RMSNorm, per element (either path):
//   sum of squares within gamma_w; /w, +eps, sqrt, 1/ and two multiplies add
//   six roundings, sqrt halves the relative error of its argument:
//   |err y_i| <= |y_i| (gamma_w / 2 + 6u).
TEST(Norms, RmsNormWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 7);
    for (size_t width : {1, 3, 7, 15, 16, 17, 33, 768, 1001}) {
      for (size_t offset : {0, 1}) {
        const auto x_store = random_vector(rng, width + offset, -4.0f, 4.0f);
        const auto gain = random_vector(rng, width, 0.5f, 1.5f);
        const float* x = x_store.data() + offset;
        const float eps = 1e-5f;
        std::vector<float> y_simd(width), y_scalar(width);
        rms_norm(KernelPath::kSimd, x, gain.data(), width, eps, y_simd.data());
        rms_norm(KernelPath::kScalar, x, gain.data(), width, eps, y_scalar.data());
        double sum_sq = 0.0;
        for (size_t i = 0; i < width; ++i) sum_sq += double{x[i]} * x[i];
        const double inv = 1.0 / std::sqrt(sum_sq / double(width) + eps);
        for (size_t i = 0; i < width; ++i) {
          const double exact = x[i] * inv * gain[i];
          const double bound =
              kSecondOrderSlack * std::fabs(exact) * (gamma(double(width)) / 2 + 6 * kUnitRoundoff);
          const std::string where = target + " width=" + std::to_string(width);
          expect_within("rms_norm simd-vs-scalar", y_simd[i], y_scalar[i], 2 * bound, where);
          expect_within("rms_norm simd-vs-exact", y_simd[i], exact, bound, where);
        }
      }
    }
  });
}

// LayerNorm, per element (either path), with c_i = x_i - mean, r = 1/sqrt(var+eps):
//   mean:  dm = gamma_w sum|x| / w + u |mean|
//   c_i:   dc_i = dm + u |c_i|
//   r:     relative error gamma_{w+1} / 2 (sum of squares; the shift of the
//          mean only adds dm^2, second order) + 4u (/w, +eps, sqrt, 1/)
//   y_i:   |err| <= |g_i| r (dc_i + |c_i| (gamma_{w+1}/2 + 4u + 2u)) + u |y_i|
TEST(Norms, LayerNormWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 8);
    for (size_t width : {1, 3, 7, 15, 16, 17, 33, 768, 1001}) {
      for (bool with_bias : {false, true}) {
        const auto x_store = random_vector(rng, width + 1, 1.0f, 3.0f);  // nonzero mean
        const auto gain = random_vector(rng, width, 0.5f, 1.5f);
        const auto bias = random_vector(rng, width);
        const float* x = x_store.data() + 1;
        const float* b = with_bias ? bias.data() : nullptr;
        const float eps = 1e-5f;
        std::vector<float> y_simd(width), y_scalar(width);
        layer_norm(KernelPath::kSimd, x, gain.data(), b, width, eps, y_simd.data());
        layer_norm(KernelPath::kScalar, x, gain.data(), b, width, eps, y_scalar.data());
        double sum = 0.0, sum_abs = 0.0;
        for (size_t i = 0; i < width; ++i) sum += x[i], sum_abs += std::fabs(x[i]);
        const double mean = sum / double(width);
        double var = 0.0;
        for (size_t i = 0; i < width; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= double(width);
        const double r = 1.0 / std::sqrt(var + eps);
        const double dm =
            gamma(double(width)) * sum_abs / double(width) + kUnitRoundoff * std::fabs(mean);
        const double rel_r = gamma(double(width + 1)) / 2 + 6 * kUnitRoundoff;
        for (size_t i = 0; i < width; ++i) {
          const double c = x[i] - mean;
          const double exact = c * r * gain[i] + (b ? b[i] : 0.0);
          const double bound =
              kSecondOrderSlack *
              (std::fabs(gain[i]) * r * (dm + kUnitRoundoff * std::fabs(c) + std::fabs(c) * rel_r) +
               kUnitRoundoff * std::fabs(exact));
          const std::string where = target + " width=" + std::to_string(width);
          expect_within("layer_norm simd-vs-scalar", y_simd[i], y_scalar[i], 2 * bound, where);
          expect_within("layer_norm simd-vs-exact", y_simd[i], exact, bound, where);
        }
      }
    }
  });
}

TEST(Norms, ResultIndependentOfAlignmentAndInPlace) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 9);
    const size_t width = 83;
    const auto x = random_vector(rng, width), gain = random_vector(rng, width);
    const auto bias = random_vector(rng, width);
    std::vector<float> ln(width), rms(width);
    layer_norm(KernelPath::kSimd, x.data(), gain.data(), bias.data(), width, 1e-5f, ln.data());
    rms_norm(KernelPath::kSimd, x.data(), gain.data(), width, 1e-6f, rms.data());
    std::vector<float> moved(width + 3);
    std::copy(x.begin(), x.end(), moved.begin() + 3);
    layer_norm(KernelPath::kSimd, moved.data() + 3, gain.data(), bias.data(), width, 1e-5f,
               moved.data() + 3);
    EXPECT_TRUE(same_bits(ln.data(), moved.data() + 3, width));
    std::copy(x.begin(), x.end(), moved.begin() + 2);
    rms_norm(KernelPath::kSimd, moved.data() + 2, gain.data(), width, 1e-6f, moved.data() + 2);
    EXPECT_TRUE(same_bits(rms.data(), moved.data() + 2, width));
  });
}

// ---------------------------------------------------------------------------
// Elementwise

// Max error in ulps of the result against double exp/tanh, over a dense sweep.
double max_ulp_error(KernelPath path, bool is_exp, float lo, float hi, size_t samples) {
  std::vector<float> x(samples);
  for (size_t i = 0; i < samples; ++i) {
    x[i] = lo + (hi - lo) * static_cast<float>(static_cast<double>(i) / double(samples - 1));
  }
  std::vector<float> y = x;
  if (is_exp) {
    exp_inplace(path, y.data(), samples);
  } else {
    tanh_inplace(path, y.data(), samples);
  }
  double worst = 0.0;
  for (size_t i = 0; i < samples; ++i) {
    const double exact = is_exp ? std::exp(double{x[i]}) : std::tanh(double{x[i]});
    if (std::fabs(exact) < 0x1p-126) continue;  // subnormal results: absolute error only
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    worst = std::max(worst, std::fabs(y[i] - exact) / ulp);
  }
  return worst;
}

TEST(Elementwise, ExpAndTanhUlpErrorWithinDocumentedBound) {
  const double scalar_exp = max_ulp_error(KernelPath::kScalar, true, -87.0f, 88.0f, 1 << 20);
  const double scalar_tanh = max_ulp_error(KernelPath::kScalar, false, -10.0f, 10.0f, 1 << 20);
  std::printf("scalar: exp max %.3f ulp, tanh max %.3f ulp\n", scalar_exp, scalar_tanh);
  EXPECT_LE(scalar_exp, kExpUlp);
  EXPECT_LE(scalar_tanh, kTanhUlp);
  for_each_simd_target([](const std::string& target) {
    const double exp_ulp = max_ulp_error(KernelPath::kSimd, true, -87.0f, 88.0f, 1 << 20);
    const double tanh_ulp = max_ulp_error(KernelPath::kSimd, false, -10.0f, 10.0f, 1 << 20);
    const double tanh_small = max_ulp_error(KernelPath::kSimd, false, -0.01f, 0.01f, 1 << 16);
    std::printf("%s: exp max %.3f ulp, tanh max %.3f ulp (|x|<0.01: %.3f)\n", target.c_str(),
                exp_ulp, tanh_ulp, tanh_small);
    EXPECT_LE(exp_ulp, kExpUlp);
    EXPECT_LE(tanh_ulp, kTanhUlp);
    EXPECT_LE(tanh_small, kTanhUlp);
  });
}

TEST(Elementwise, SpecialValuesMatchScalarSemantics) {
  const std::vector<float> inputs = {0.0f,    -0.0f, 1e-30f, -1e-30f,   88.0f,      89.0f, 100.0f,
                                     -100.0f, 1e30f, -1e30f, HUGE_VALF, -HUGE_VALF, NAN};
  for_each_simd_target([&](const std::string& target) {
    std::vector<float> exp_simd = inputs, exp_scalar = inputs;
    exp_inplace(KernelPath::kSimd, exp_simd.data(), inputs.size());
    exp_inplace(KernelPath::kScalar, exp_scalar.data(), inputs.size());
    std::vector<float> tanh_simd = inputs, tanh_scalar = inputs;
    tanh_inplace(KernelPath::kSimd, tanh_simd.data(), inputs.size());
    tanh_inplace(KernelPath::kScalar, tanh_scalar.data(), inputs.size());
    std::vector<float> silu_simd = inputs, silu_scalar = inputs;
    const std::vector<float> ones(inputs.size(), 1.0f);
    silu_mul(KernelPath::kSimd, silu_simd.data(), ones.data(), inputs.size());
    silu_mul(KernelPath::kScalar, silu_scalar.data(), ones.data(), inputs.size());
    std::vector<float> gelu_simd = inputs, gelu_scalar = inputs;
    gelu_tanh(KernelPath::kSimd, gelu_simd.data(), inputs.size());
    gelu_tanh(KernelPath::kScalar, gelu_scalar.data(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string where = target + " x=" + std::to_string(inputs[i]);
      const auto close = [](float a, float b) {
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
        if (std::isinf(a) || std::isinf(b)) return a == b;
        return std::fabs(double{a} - b) <= 8 * kUlpRelative * std::fabs(double{b}) + 1e-37;
      };
      EXPECT_TRUE(close(exp_simd[i], exp_scalar[i])) << where << " exp " << exp_simd[i];
      EXPECT_TRUE(close(tanh_simd[i], tanh_scalar[i])) << where << " tanh " << tanh_simd[i];
      EXPECT_TRUE(close(silu_simd[i], silu_scalar[i])) << where << " silu " << silu_simd[i];
      EXPECT_TRUE(close(gelu_simd[i], gelu_scalar[i])) << where << " gelu " << gelu_simd[i];
    }
  });
}

// GELU (tanh form), per element (either path), a = c (x + k x^3), t = tanh(a):
//   da = gamma_5 c (|x| + k |x|^3)            (five roundings build a)
//   dt = (1 - t^2) da + kTanhUlp 2^-23 |t|
//   |err y| <= |x|/2 (dt + u |1 + t|) + u |y|
// SiLU * up, per element, e = exp(-g):
//   |err y| <= |y| (kExpUlp 2^-23 e / (1 + e) + 3u)
TEST(Elementwise, ActivationsWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 10);
    for (size_t n : {0, 1, 3, 7, 15, 16, 17, 1000}) {
      const auto x = random_vector(rng, n, -8.0f, 8.0f);
      const auto up = random_vector(rng, n, -2.0f, 2.0f);
      std::vector<float> gelu_simd = x, gelu_scalar = x, silu_simd = x, silu_scalar = x;
      gelu_tanh(KernelPath::kSimd, gelu_simd.data(), n);
      gelu_tanh(KernelPath::kScalar, gelu_scalar.data(), n);
      silu_mul(KernelPath::kSimd, silu_simd.data(), up.data(), n);
      silu_mul(KernelPath::kScalar, silu_scalar.data(), up.data(), n);
      const double c = 0.7978845608028654, k = 0.044715;
      for (size_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double a = c * (v + k * v * v * v);
        const double t = std::tanh(a);
        const double gelu = 0.5 * v * (1.0 + t);
        const double da = gamma(5) * c * (std::fabs(v) + k * std::fabs(v * v * v));
        const double dt = (1.0 - t * t) * da + kTanhUlp * kUlpRelative * std::fabs(t);
        const double gelu_bound =
            kSecondOrderSlack * (std::fabs(v) / 2 * (dt + kUnitRoundoff * std::fabs(1.0 + t)) +
                                 kUnitRoundoff * std::fabs(gelu));
        const std::string where = target + " x=" + std::to_string(v);
        expect_within("gelu simd-vs-scalar", gelu_simd[i], gelu_scalar[i], 2 * gelu_bound, where);
        expect_within("gelu simd-vs-exact", gelu_simd[i], gelu, gelu_bound, where);
        const double e = std::exp(-v);
        const double silu = v / (1.0 + e) * up[i];
        const double silu_bound = kSecondOrderSlack * std::fabs(silu) *
                                  (kExpUlp * kUlpRelative * e / (1.0 + e) + 3 * kUnitRoundoff);
        expect_within("silu simd-vs-scalar", silu_simd[i], silu_scalar[i], 2 * silu_bound, where);
        expect_within("silu simd-vs-exact", silu_simd[i], silu, silu_bound, where);
      }
    }
  });
}

// An element's bits do not depend on where it sits in the array (vector body
// or padded tail) nor on the array's alignment.
TEST(Elementwise, ElementBitsIndependentOfPosition) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 11);
    const size_t n = 203;
    const auto x = random_vector(rng, n, -6.0f, 6.0f), up = random_vector(rng, n);
    std::vector<float> gelu_all = x, silu_all = x, add_all = x;
    gelu_tanh(KernelPath::kSimd, gelu_all.data(), n);
    silu_mul(KernelPath::kSimd, silu_all.data(), up.data(), n);
    add_inplace(KernelPath::kSimd, add_all.data(), up.data(), n);
    for (size_t start = 0; start < n; start += 1 + start % 7) {
      const size_t count = std::min(n - start, 1 + start % 19);
      std::vector<float> gelu_part(x.begin() + start, x.begin() + start + count);
      std::vector<float> silu_part = gelu_part, add_part = gelu_part;
      gelu_tanh(KernelPath::kSimd, gelu_part.data(), count);
      silu_mul(KernelPath::kSimd, silu_part.data(), up.data() + start, count);
      add_inplace(KernelPath::kSimd, add_part.data(), up.data() + start, count);
      ASSERT_TRUE(same_bits(gelu_part.data(), gelu_all.data() + start, count)) << start;
      ASSERT_TRUE(same_bits(silu_part.data(), silu_all.data() + start, count)) << start;
      ASSERT_TRUE(same_bits(add_part.data(), add_all.data() + start, count)) << start;
    }
  });
}

// Addition rounds identically on both paths: bitwise equal.
TEST(Elementwise, AddInplaceEqualsScalarBitwise) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 12);
    for (size_t n : {0, 1, 15, 16, 17, 1000}) {
      const auto y = random_vector(rng, n), x = random_vector(rng, n);
      std::vector<float> simd = y, scalar = y;
      add_inplace(KernelPath::kSimd, simd.data(), x.data(), n);
      add_inplace(KernelPath::kScalar, scalar.data(), x.data(), n);
      ASSERT_TRUE(same_bits(simd.data(), scalar.data(), n)) << n;
    }
  });
}

}  // namespace
}  // namespace kvcheck::cpu
