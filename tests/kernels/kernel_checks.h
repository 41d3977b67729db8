// What every kernel test shares: the derived error model (unit roundoff,
// gamma_n, the exp/tanh ulp bounds of docs/KERNELS.md), seeded inputs from
// the project's one RNG, the worst error/bound ratio of each check (printed
// by ZzReport at the end of the binary), and the loop over every Highway
// target this CPU supports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/rng.h"

namespace kvcheck::cpu {

inline constexpr double kUnitRoundoff = 0x1p-24;
// Documented (docs/KERNELS.md) and measured by ExpAndTanhUlpError: the max
// error of the elementwise exp/tanh of either path, in ulps of the result.
inline constexpr double kExpUlp = 2.0;
inline constexpr double kTanhUlp = 4.0;
// First-order error bounds drop O(u^2) terms; this factor covers them.
inline constexpr double kSecondOrderSlack = 1.01;
// Relative size of one ulp of a float result, as a bound: ulp(y) <= 2^-23 |y|.
inline constexpr double kUlpRelative = 0x1p-23;

inline constexpr uint64_t kSeed = 0x6b76636865636bULL;

inline double gamma(double n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

// The project's RNG with the one draw these tests add: a float in [lo, hi)
// on a 2^-24 grid of the interval.
class Rng : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(next() >> 40) * 0x1p-24);
  }
};

std::vector<float> random_vector(Rng& rng, size_t n, float lo = -1.0f, float hi = 1.0f);

bool same_bits(const float* a, const float* b, size_t n);

// Worst observed error/bound ratio per check, printed at the end so the
// report can quote it.
std::map<std::string, double>& worst_ratios();

// Records |a - b| / bound, failing when it exceeds 1. NaN must match NaN.
void expect_within(const std::string& check, double a, double b, double bound,
                   const std::string& where);

// Runs fn once per compiled Highway target this CPU supports, with the SIMD
// path dispatching to exactly that target.
void for_each_simd_target(const std::function<void(const std::string&)>& fn);

}  // namespace kvcheck::cpu
