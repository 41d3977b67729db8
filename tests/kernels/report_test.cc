// The targets tested and the worst error/bound ratio of every check, printed
// for docs/KERNELS.md. Linked last, so ZzReport runs after every other test
// of the binary (gtest runs tests in registration order unless shuffled).
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

// Each Highway target tested, for the report.
TEST(KernelTargets, ListsTestedTargets) {
  std::string list;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    list += std::string(hwy::TargetName(target)) + " ";
  }
  std::printf("simd targets tested: %s(best: %s)\n", list.c_str(), simd_target_name());
  EXPECT_FALSE(list.empty());
}

// Prints the worst error/bound ratios seen by every check above (gtest runs
// tests in declaration order within the binary unless shuffled).
TEST(ZzReport, WorstErrorBoundRatios) {
  for (const auto& [check, ratio] : worst_ratios()) {
    std::printf("worst error/bound %-26s %.4f\n", check.c_str(), ratio);
  }
  SUCCEED();
}

}  // namespace
}  // namespace kvcheck::cpu
