// The shared helpers of the kernel tests (kernel_checks.h).
#include "tests/kernels/kernel_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "engine/cpu/kernels.h"
#include "hwy/targets.h"

namespace kvcheck::cpu {

std::vector<float> random_vector(Rng& rng, size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& f : v) f = rng.uniform(lo, hi);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

std::map<std::string, double>& worst_ratios() {
  static std::map<std::string, double> ratios;
  return ratios;
}

void expect_within(const std::string& check, double a, double b, double bound,
                   const std::string& where) {
  if (std::isnan(a) || std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a) && std::isnan(b))
        << check << " " << where << ": " << a << " vs " << b;
    return;
  }
  const double diff = std::fabs(a - b);
  const double ratio = diff == 0.0 ? 0.0 : (bound > 0.0 ? diff / bound : HUGE_VAL);
  double& worst = worst_ratios()[check];
  worst = std::max(worst, ratio);
  EXPECT_LE(ratio, 1.0) << check << " " << where << ": " << a << " vs " << b << " bound " << bound;
}

void for_each_simd_target(const std::function<void(const std::string&)>& fn) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    SCOPED_TRACE("target " + name);
    ASSERT_EQ(std::string(simd_target_name()), name) << "dispatch did not follow the mock";
    fn(name);
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace kvcheck::cpu
