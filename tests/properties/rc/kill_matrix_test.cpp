// The fault kill matrix (label mutants; label gpu for the CUDA build of this
// file): every fault of the backend's catalogue must fail some property, the
// "caught by" properties of docs/FAULTS.md each catch theirs, and the correct
// engine survives. The backend is KVCHECK_KILL_BACKEND at build time (cpu,
// or cuda), overridable with the environment variable of the same name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "engine/faults.h"
#include "properties/rc/kill_matrix.h"

#ifndef KVCHECK_KILL_BACKEND
#define KVCHECK_KILL_BACKEND "cpu"
#define KVCHECK_KILL_SUITE KillMatrix
#endif

namespace kvcheck::test {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

bool runs_here(const std::string& name) {
  for (const std::string& n : default_backend_names()) {
    if (n == name) return true;
  }
  return false;
}

TEST(KVCHECK_KILL_SUITE, EveryFaultIsKilledAndTheCorrectEngineSurvives) {
  const char* from_env = std::getenv("KVCHECK_KILL_BACKEND");
  const std::string spec = from_env != nullptr ? from_env : KVCHECK_KILL_BACKEND;
  if (spec == "cuda" && !runs_here("cuda")) GTEST_SKIP() << "no CUDA device";
  const Backend backend = backend_registry().resolve(spec);
  ASSERT_TRUE(backend.traits.operations.fault_switches) << spec << " has no fault switches";
  ASSERT_EQ(rcgen::fault_catalogue().size(), size_t(kFaultCount))
      << "a fault is missing from the catalogue";
  rcgen::KillMatrixOptions options;
  options.seed = uint64_t(env_int("KVCHECK_KILL_SEED", 0x6b76));
  options.cases_per_cell = env_int("KVCHECK_KILL_CASES", 100);
  options.correct_cases = env_int("KVCHECK_KILL_CORRECT_CASES", 1000);
  options.catalogue_applies = !backend.weakened;
  std::cout << "kill matrix on " << spec << ": seed=" << options.seed
            << " cases per cell=" << options.cases_per_cell
            << " (KVCHECK_KILL_BACKEND, KVCHECK_KILL_SEED, KVCHECK_KILL_CASES, "
               "KVCHECK_KILL_CORRECT_CASES)\n";
  const rcgen::KillMatrix matrix =
      rcgen::run_kill_matrix([&](FaultSet f) { return backend.under_test(f); }, options);
  std::cout << matrix.table() << matrix.counterexamples() << std::flush;
  for (const std::string& problem : matrix.problems()) ADD_FAILURE() << problem;
}

}  // namespace
}  // namespace kvcheck::test
