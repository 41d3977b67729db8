// The deterministic shrinker: candidates are valid and smaller, it reaches a
// fixed point, it is deterministic, and from a bloated failing case it
// reaches at most twice the shrink target of docs/FAULTS.md for every fault.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "backends/in_tree.h"
#include "properties/rc/generators.h"
#include "properties/repro/shrink.h"
#include "properties/runner.h"
#include "tests/properties/repro/bloated_cases.h"

namespace kvcheck::test {
namespace {

Scenario generated(uint64_t seed, int size = 100) {
  return rcgen::scenario()(rc::Random(seed), size).value();
}

TEST(Shrink, CandidatesValidateAndAreSmallerSmallestFirst) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Scenario s = generated(seed);
    const std::pair<int, int64_t> base{s.size(), shrink_complexity(s)};
    const std::vector<Scenario> candidates = shrink_candidates(s);
    EXPECT_FALSE(candidates.empty() && s.size() > 5) << s.to_text();
    std::pair<int, int64_t> previous{0, 0};
    for (const Scenario& c : candidates) {
      ASSERT_EQ(c.validate(), "") << c.to_text();
      const std::pair<int, int64_t> key{c.size(), shrink_complexity(c)};
      EXPECT_LT(key, base);
      EXPECT_LE(previous, key) << "not smallest first";
      previous = key;
    }
  }
}

// A stand-in failure: "some sequence was fed at least 3 tokens in a model of
// at least 2 layers". The smallest such scenario is 2 layers, 1 head, 1
// sequence, one step of 3 tokens: size 2 + 1 + 1 + 3 + 1 = 8.
std::optional<Verdict> three_tokens_two_layers(const Scenario& s) {
  if (s.config.n_layers < 2) return std::nullopt;
  const SchedulePlan plan = plan_schedule(s);
  for (int fed : plan.fed) {
    if (fed >= 3) {
      Verdict v;
      v.passed = false;
      v.summary = "stand-in failure";
      return v;
    }
  }
  return std::nullopt;
}

TEST(Shrink, ReachesTheMinimumOfAStandInFailureDeterministically) {
  int shrunk = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Scenario s = generated(seed);
    const std::optional<Verdict> v = three_tokens_two_layers(s);
    if (!v) continue;
    ++shrunk;
    const ShrinkResult first = shrink_scenario(s, *v, three_tokens_two_layers);
    const ShrinkResult second = shrink_scenario(s, *v, three_tokens_two_layers);
    EXPECT_TRUE(first.fixed_point);
    EXPECT_EQ(first.size_before, s.size());
    EXPECT_EQ(first.size_after, 8) << first.scenario.to_text();
    EXPECT_EQ(first.scenario, second.scenario) << "not deterministic";
    EXPECT_EQ(first.scenario.validate(), "");
    // Narrowest model and simplest tokens too.
    EXPECT_EQ(first.scenario.config.d_model, 1);
    EXPECT_EQ(first.scenario.config.vocab, 1);
    EXPECT_EQ(first.scenario.capacity, 3);
  }
  EXPECT_GT(shrunk, 5);
}

// The first generated scenario with three tokens in two layers, shrunk under `options`.
ShrinkResult shrunk_within(const ShrinkOptions& options) {
  Scenario s;
  for (uint64_t seed = 1; !three_tokens_two_layers(s); ++seed) s = generated(seed);
  return shrink_scenario(s, *three_tokens_two_layers(s), three_tokens_two_layers, options);
}

TEST(Shrink, StopsAtTheEvaluationBudget) {
  ShrinkOptions options;
  options.max_evaluations = 3;
  const ShrinkResult r = shrunk_within(options);
  EXPECT_LE(r.evaluations, 3);
  EXPECT_FALSE(r.fixed_point);
  EXPECT_FALSE(r.stopped_by_time);
  EXPECT_TRUE(three_tokens_two_layers(r.scenario));
}

// A time limit that has passed before the first check stops the shrink at
// once, and says that time stopped it: the one limit that depends on the
// machine is named as such.
TEST(Shrink, SaysWhenTheTimeLimitStoppedIt) {
  ShrinkOptions options;
  options.max_seconds = 0;
  const ShrinkResult r = shrunk_within(options);
  EXPECT_EQ(r.evaluations, 0);
  EXPECT_FALSE(r.fixed_point);
  EXPECT_TRUE(r.stopped_by_time);
}

TEST(Shrink, RefusesAPassingCase) {
  EXPECT_FALSE(shrink_failure(generated(1), Property::kOracle, cpu_engine_factory()));
}

TEST(Shrink, ReachesTwiceTheShrinkTargetOnEveryFault) {
  for (const FaultTarget& target : fault_targets()) {
    const std::string name(fault_name(target.fault));
    const std::optional<CaseFile> bloated = bloated_case(target, 100);
    ASSERT_TRUE(bloated) << name << ": no bloated failing case";
    const EngineUnderTest factory(cpu_engine_factory(FaultSet(target.fault)),
                                  cpu_engine_traits_with_operations());
    const std::optional<ShrinkResult> r =
        shrink_failure(bloated->scenario, target.property, factory);
    ASSERT_TRUE(r) << name;
    EXPECT_TRUE(r->fixed_point) << name;
    EXPECT_EQ(r->scenario.validate(), "") << name;
    EXPECT_FALSE(check_property(target.property, r->scenario, factory).passed) << name;
    EXPECT_LE(r->size_after, 2 * target.shrink_target)
        << name << ": " << r->size_before << " -> " << r->size_after << "\n"
        << r->scenario.to_text();
    std::printf("%-26s %-12s %4d -> %3d (target %d, %d checks)\n", name.c_str(),
                std::string(property_name(target.property)).c_str(), r->size_before, r->size_after,
                target.shrink_target, r->evaluations);
  }
}

}  // namespace
}  // namespace kvcheck::test
