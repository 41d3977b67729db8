// Save and restore in the schedule model (docs/OPERATIONS.md, "Save and
// restore"): validation needs a save and contiguous storage, the plan puts
// the saved content back, every property holds on the correct engine, and
// P6, P1 and P12 fail where a restore keeps what it should clear.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/in_tree.h"
#include "properties/property.h"
#include "properties/runner.h"
#include "properties/schedule/plan.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

EngineUnderTest cpu(FaultSet faults = {}) {
  return EngineUnderTest(cpu_engine_factory(faults), cpu_engine_traits_with_operations());
}

TEST(SaveRestore, ARestoreNeedsASaveAndContiguousStorage) {
  const Scenario s = save_restore_scenario();
  ASSERT_EQ(s.validate(), "");
  Scenario unsaved = s;
  unsaved.calls.erase(unsaved.calls.begin() + 2);  // s0's save
  EXPECT_NE(unsaved.validate().find("restore of sequence 0, which was never saved"),
            std::string::npos)
      << unsaved.validate();
  Scenario paged = s;
  paged.block_size = 2;
  EXPECT_NE(paged.validate().find("save: needs contiguous storage"), std::string::npos)
      << paged.validate();
  // A case file writes and reads both lines.
  EXPECT_EQ(Call::save(1).to_text(), "save s1");
  EXPECT_EQ(Call::restore(0).to_text(), "restore s0");
  // An engine that does not declare them: the scenario is not applicable.
  EngineTraits without = cpu_engine_traits_with_operations();
  without.operations.save_restore = false;
  EXPECT_EQ(traits_exclude(without, s), "save and restore (sequence state)");
}

TEST(SaveRestore, ThePlanPutsTheSavedContentBack) {
  const Scenario s = save_restore_scenario();
  const SchedulePlan plan = plan_schedule(s);
  const std::vector<int32_t>& s0 = s.sequences[0];
  // s0 ends restored to its first 4 tokens (its second restore, under s2).
  EXPECT_EQ(plan.content[0], std::vector<int32_t>(s0.begin(), s0.begin() + 4));
  EXPECT_EQ(plan.content_chunks[0], std::vector<int>{4});
  EXPECT_FALSE(plan.plain[0]);
  EXPECT_TRUE(plan.truncated[0]);
  // Segments: the start, the truncation and each restore open one.
  EXPECT_EQ(plan.segments[0].size(), 4u);
  // s2 forked s0 at 5 (4 saved + the token fed after the first restore).
  const std::vector<int32_t> at_fork = {s0[0], s0[1], s0[2], s0[3], s0[7]};
  EXPECT_EQ(std::vector<int32_t>(plan.content[2].begin(), plan.content[2].begin() + 5), at_fork);
  // s1 was saved after its context shift: restored, its cells are 0 and 1
  // again (its first token erased), then one more token at 2.
  EXPECT_EQ(plan.cells[1], (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(plan.shifted[1]);
}

TEST(SaveRestore, EveryPropertyHoldsOnTheCorrectEngine) {
  const Scenario s = save_restore_scenario();
  for (int p = 0; p < kPropertyCount; ++p) {
    const Verdict v = check_property(Property(p), s, cpu());
    EXPECT_TRUE(v.passed) << property_name(Property(p)) << ": " << v.summary << "\n" << v.detail;
  }
  EXPECT_TRUE(check_property(Property::kCacheState, s, cpu()).applicable);
  EXPECT_TRUE(check_property(Property::kRollback, s, cpu()).applicable);
}

// s1 holds 4 cells at its restore to 2: the faulty restore keeps the last
// two, P6 sees them at the restore (call 15) and P1 in the next token.
TEST(SaveRestore, ARestoreThatKeepsItsTailFailsP6AtTheRestore) {
  const Scenario s = save_restore_scenario();
  const EngineUnderTest faulty = cpu(FaultSet(Fault::kRestoreKeepsTail));
  const Verdict p6 = check_property(Property::kCacheState, s, faulty);
  ASSERT_FALSE(p6.passed);
  EXPECT_EQ(p6.where.call, 15) << p6.summary;
  EXPECT_EQ(p6.where.sequence, 1) << p6.summary;
  const Verdict p1 = check_property(Property::kOracle, s, faulty);
  ASSERT_FALSE(p1.passed);
  EXPECT_EQ(p1.where.call, 16) << p1.summary;
}

}  // namespace
}  // namespace kvcheck::test
