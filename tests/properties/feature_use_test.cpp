// Proof of use (properties/feature_use.h): each cache feature is noted when
// the engine's introspection says it happened, and not when a fault keeps it
// from happening or the engine does not offer the introspection.
#include <gtest/gtest.h>

#include "backends/in_tree.h"
#include "properties/property.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

using test::minimal_fault_scenario;

bool used(const Verdict& v, Feature f) {
  return (v.features_used & feature_bit(f)) != 0;
}

Verdict check(Property p, const Scenario& s, FaultSet faults = FaultSet()) {
  const EngineUnderTest subject(cpu_engine_factory(faults), cpu_engine_traits_with_operations());
  return check_property(p, s, subject);
}

TEST(FeatureUse, ScopesNestAndWatchOnlyWhatIsObservable) {
  FeatureUse outer(feature_bit(Feature::kPrefixHit) | feature_bit(Feature::kRollback));
  {
    FeatureUse inner(feature_bit(Feature::kPrefixHit) | feature_bit(Feature::kEviction));
    EXPECT_TRUE(watching(Feature::kPrefixHit));
    EXPECT_FALSE(watching(Feature::kEviction));  // the outer scope does not observe it
    EXPECT_FALSE(watching(Feature::kRollback));  // nor does the inner one
    note_used(Feature::kPrefixHit);
    note_used(Feature::kEviction);
    EXPECT_FALSE(watching(Feature::kPrefixHit));  // seen: no more reads for it
    EXPECT_EQ(inner.used(), feature_bit(Feature::kPrefixHit));
  }
  EXPECT_EQ(outer.used(), feature_bit(Feature::kPrefixHit));
}

TEST(FeatureUse, NothingIsNotedOutsideAScope) {
  note_used(Feature::kPrefixHit);
  EXPECT_FALSE(watching(Feature::kPrefixHit));
}

TEST(FeatureUse, APrefixHitIsNotedOnlyWhenTheEngineReusedTokens) {
  Scenario hit = minimal_fault_scenario(Fault::kPrefixHitExtraBlock);  // s1 = [1 5] after [1 2]
  const Verdict v = check(Property::kOracle, hit);
  ASSERT_TRUE(v.passed) << v.summary;
  EXPECT_TRUE(used(v, Feature::kPrefixHit));
  hit.sequences[1][0] = 3;  // no common prefix: nothing to reuse
  EXPECT_FALSE(used(check(Property::kOracle, hit), Feature::kPrefixHit));
}

TEST(FeatureUse, CopyOnWriteIsNotedWhenAWriteSplitsAForksSharedBlock) {
  const Scenario s = minimal_fault_scenario(Fault::kCowSkipped);  // fork at 1 of B = 2, writes
  const Verdict v = check(Property::kOracle, s);
  ASSERT_TRUE(v.passed) << v.summary;
  EXPECT_TRUE(used(v, Feature::kCopyOnWrite));
  // The fault writes into the shared block in place: both tables keep it.
  EXPECT_FALSE(
      used(check(Property::kOracle, s, FaultSet(Fault::kCowSkipped)), Feature::kCopyOnWrite));
  // Without pool(), copy-on-write cannot be observed and is not watched.
  EngineTraits traits = cpu_engine_traits_with_operations();
  traits.operations.pool_report = false;
  traits.operations.storage_check = false;
  const Verdict blind = check_property(Property::kOracle, s, {cpu_engine_factory(), traits});
  ASSERT_TRUE(blind.passed) << blind.summary;
  EXPECT_FALSE(used(blind, Feature::kCopyOnWrite));
}

TEST(FeatureUse, RollbackIsNotedWhenTruncateShortensTheSequence) {
  Scenario s = minimal_fault_scenario(Fault::kCowSkipped);
  s.calls.push_back(Call::truncate(0, 1));
  const Verdict v = check(Property::kOracle, s);
  ASSERT_TRUE(v.passed) << v.summary;
  EXPECT_TRUE(used(v, Feature::kRollback));
  s.calls.back() = Call::truncate(0, 0);  // no rollback at all
  EXPECT_FALSE(used(check(Property::kOracle, s), Feature::kRollback));
}

TEST(FeatureUse, KeyPartitioningIsNotedWhenKeysKeepApartWhatWouldBeShared) {
  const Scenario s = minimal_fault_scenario(Fault::kPrefixIgnoresKey);  // keys 1 and 2
  const Verdict v = check(Property::kPrefix, s);
  ASSERT_TRUE(v.passed) << v.summary;
  EXPECT_TRUE(used(v, Feature::kKeyPartition));
  const Verdict shared = check(Property::kPrefix, s, FaultSet(Fault::kPrefixIgnoresKey));
  EXPECT_FALSE(shared.passed);
  EXPECT_FALSE(used(shared, Feature::kKeyPartition));
}

TEST(FeatureUse, EvictionIsNotedWhenACachedBlockIsTakenForOtherData) {
  // B = 1, a pool of 3: s0's two blocks stay cached after it finishes, and
  // s1's three tokens need them.
  Scenario s = minimal_fault_scenario(Fault::kPrefixHitExtraBlock);
  s.pool_blocks = 3;
  s.sequences = {{1, 2}, {3, 4, 5}};
  s.calls = {Call::start(0), Call::step({{0, 2}}), Call::finish(0), Call::start(1),
             Call::step({{1, 3}})};
  const Verdict v = check(Property::kOracle, s);
  ASSERT_TRUE(v.passed) << v.summary;
  EXPECT_TRUE(used(v, Feature::kEviction));
  s.pool_blocks = 5;  // room for both: nothing evicted
  EXPECT_FALSE(used(check(Property::kOracle, s), Feature::kEviction));
}

}  // namespace
}  // namespace kvcheck
