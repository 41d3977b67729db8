// The fault kill matrix on the GPU: every fault of engine/faults.h, switched
// on in the CUDA engine, must fail some property (check_all: every
// property per case) within KVCHECK_GPU_KILL_CASES generated cases (default
// 100), and the correct CUDA engine must pass KVCHECK_GPU_KILL_CORRECT_CASES
// (default 100). Shrinking is off by default to fit the device script's
// budget (KVCHECK_GPU_KILL_SHRINK=1 turns it on). Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "engine/faults.h"
#include "properties/rc/hunt.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvcheck::test {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

TEST(GpuKillMatrix, EveryFaultIsKilledAndTheCorrectEngineSurvives) {
  KVCHECK_REQUIRE_GPU();
  rcgen::HuntOptions options;
  options.seed = uint64_t(env_int("KVCHECK_KILL_SEED", 0x6b76));
  options.max_cases = env_int("KVCHECK_GPU_KILL_CASES", 100);
  options.shrink = env_int("KVCHECK_GPU_KILL_SHRINK", 0) != 0;
  const int correct_cases = env_int("KVCHECK_GPU_KILL_CORRECT_CASES", 100);
  std::cout << "gpu kill matrix: seed=" << options.seed << " cases per fault=" << options.max_cases
            << " correct cases=" << correct_cases << " shrink=" << options.shrink << "\n";

  rcgen::HuntOptions correct_options = options;
  correct_options.max_cases = correct_cases;
  const EngineFactory correct = cuda_engine_factory();
  const rcgen::HuntResult baseline =
      rcgen::hunt([&](const Scenario& s) { return check_all(s, correct); }, rcgen::Emphasis::kAny,
                  correct_options);
  std::printf("%-26s %8s %6s %8s  %s\n", "fault", "cases", "size", "seconds", "verdict");
  std::printf("%-26s %8d %6s %8.2f  %s\n", "(correct engine)", baseline.cases_run, "-",
              baseline.seconds, baseline.failed ? baseline.verdict.summary.c_str() : "passed");
  EXPECT_FALSE(baseline.failed) << "the correct CUDA engine fails: " << baseline.verdict.summary
                                << "\n"
                                << baseline.verdict.detail
                                << (baseline.counterexample ? baseline.counterexample->to_text()
                                                            : "");

  for (int i = 0; i < kFaultCount; ++i) {
    const Fault fault = static_cast<Fault>(i);
    const EngineFactory faulty = cuda_engine_factory(FaultSet(fault));
    const rcgen::HuntResult r = rcgen::hunt([&](const Scenario& s) { return check_all(s, faulty); },
                                            rcgen::Emphasis::kAny, options);
    const std::string size = r.counterexample ? std::to_string(r.counterexample->size()) : "-";
    std::printf("%-26s %8d %6s %8.2f  %s\n", std::string(fault_name(fault)).c_str(), r.cases_run,
                size.c_str(), r.seconds, r.failed ? r.verdict.summary.c_str() : "SURVIVED");
    EXPECT_TRUE(r.failed) << fault_name(fault) << " survived " << options.max_cases
                          << " cases on the GPU";
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace kvcheck::test
