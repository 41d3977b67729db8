// The fault kill matrix as a CI gate (properties/rc/kill_matrix.h): fails
// when a fault survives every property, when a property that docs/FAULTS.md
// says catches a fault misses it, when a shrunk counterexample is more than
// twice its hand-derived target, or when the correct engine fails anything (a
// suite that flags the correct engine is as broken as one that misses a
// fault). The printed matrix is pasted into docs/KILL_MATRIX.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "properties/rc/kill_matrix.h"
#include "properties/runner.h"

namespace kvcheck::test {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

TEST(KillMatrix, EveryFaultIsKilledAndTheCorrectEngineSurvives) {
  ASSERT_EQ(rcgen::fault_catalogue().size(), size_t(kFaultCount))
      << "a fault is missing from the catalogue";
  rcgen::KillMatrixOptions options;
  options.seed = uint64_t(env_int("KVCHECK_KILL_SEED", 0x6b76));
  options.cases_per_cell = env_int("KVCHECK_KILL_CASES", 100);
  options.correct_cases = env_int("KVCHECK_KILL_CORRECT_CASES", 1000);
  std::cout << "kill matrix: seed=" << options.seed << " cases per cell=" << options.cases_per_cell
            << " (KVCHECK_KILL_SEED, KVCHECK_KILL_CASES, KVCHECK_KILL_CORRECT_CASES)\n";
  const rcgen::KillMatrix matrix =
      rcgen::run_kill_matrix([](FaultSet f) { return cpu_engine_factory(f); }, options);
  std::cout << matrix.table() << matrix.counterexamples() << std::flush;
  for (const std::string& problem : matrix.problems()) ADD_FAILURE() << problem;
}

}  // namespace
}  // namespace kvcheck::test
