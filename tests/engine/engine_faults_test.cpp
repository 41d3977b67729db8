// Every fault switch, run on the smallest scenario derived by hand in
// docs/FAULTS.md, visibly changes what the engine returns.
#include <gtest/gtest.h>

#include <variant>

#include "tests/engine/engine_test_util.h"
#include "tests/engine/fault_cases.h"

namespace kvcheck::test {
namespace {

Outcome run(const MinimalCase& m, FaultSet faults) {
  return run_minimal_case(m, faults, make_cpu_engine);
}

bool same(const Outcome& a, const Outcome& b) {
  return same_outcome(a, b);
}

TEST(EngineFaults, EveryFaultHasAMinimalCase) {
  ASSERT_EQ(minimal_cases().size(), size_t(kFaultCount));
  for (int i = 0; i < kFaultCount; ++i) {
    EXPECT_EQ(minimal_cases()[size_t(i)].fault, static_cast<Fault>(i));
  }
}

TEST(EngineFaults, EachFaultChangesItsMinimalCase) {
  for (const MinimalCase& m : minimal_cases()) {
    const Outcome correct = run(m, FaultSet());
    const Outcome faulty = run(m, FaultSet(m.fault));
    ASSERT_EQ(correct.index(), m.fault == Fault::kCapacityWraps ? 1u : 0u)
        << fault_name(m.fault) << ": the correct engine must "
        << (m.fault == Fault::kCapacityWraps ? "refuse" : "run") << " the case";
    EXPECT_FALSE(same(correct, faulty))
        << fault_name(m.fault) << " left its minimal case unchanged";
  }
}

TEST(EngineFaults, EachFaultIsSilentOnAOneTokenCaseItCannotAffect) {
  // Off-target check: faults about later calls leave a lone one-token prefill
  // of a one-layer MHA model alone, so a change above is the fault's doing.
  MinimalCase lone{Fault::kCount, Family::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}})}};
  const Outcome correct = run(lone, FaultSet());
  for (int i = 0; i < kFaultCount; ++i) {
    const Fault f = static_cast<Fault>(i);
    if (f == Fault::kKvSwapped) continue;  // acts on the very first write
    EXPECT_TRUE(same(correct, run(lone, FaultSet(f)))) << fault_name(f);
  }
}

TEST(EngineFaults, NamesRoundTrip) {
  for (int i = 0; i < kFaultCount; ++i) {
    const Fault f = static_cast<Fault>(i);
    EXPECT_EQ(parse_fault(fault_name(f)), f);
    EXPECT_FALSE(fault_summary(f).empty());
  }
  EXPECT_EQ(parse_fault("no_such_fault"), std::nullopt);
  EXPECT_EQ(FaultSet().to_string(), "none");
  EXPECT_EQ(FaultSet(Fault::kKvSwapped).with(Fault::kSharedRows).to_string(),
            "shared_rows,kv_swapped");
}

}  // namespace
}  // namespace kvcheck::test
