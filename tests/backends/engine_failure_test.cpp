// An engine that fails in a way kvcheck never asked for (an internal error
// code from a plugin, a std::out_of_range from a map lookup in C++) fails
// the property with the exception's text, and a hunt keeps the scenario, so
// a case file can be written. It neither crashes nor passes.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "properties/rc/hunt.h"
#include "tests/backends/wrapped_engine.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

// finish() looks the sequence up in a map it never filled: map::at throws.
class FinishThrows final : public test::WrappedEngine {
 public:
  using WrappedEngine::WrappedEngine;
  void finish(SequenceId sequence) override {
    const std::map<SequenceId, int> rows;
    inner_->finish(sequence + rows.at(sequence));
  }
};

EngineUnderTest finish_throws() {
  return EngineUnderTest(test::wrapping<FinishThrows>(cpu_engine_factory()), cpu_engine_traits());
}

EngineUnderTest finish_internal_error_plugin() {
  return backend_registry()
      .resolve(std::string("plugin:") + KVCHECK_CPU_PLUGIN + "?finish=internal_error")
      .under_test();
}

// rich_scenario finishes sequence 0 under two running ones.
const Scenario& with_a_finish() {
  static const Scenario s = test::rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  return s;
}

TEST(EngineFailure, AnExceptionFromFinishFailsCompaction) {
  const Verdict v = check_property(Property::kCompaction, with_a_finish(), finish_throws());
  EXPECT_TRUE(v.applicable) << v.summary;
  EXPECT_FALSE(v.passed) << v.summary;
  EXPECT_NE(v.summary.find("map::at"), std::string::npos) << v.summary;
}

TEST(EngineFailure, APluginsInternalErrorFailsCompaction) {
  const Verdict v =
      check_property(Property::kCompaction, with_a_finish(), finish_internal_error_plugin());
  EXPECT_TRUE(v.applicable) << v.summary;
  EXPECT_FALSE(v.passed) << v.summary;
  EXPECT_NE(v.summary.find("plugin finish: finish: map::at (code 8)"), std::string::npos)
      << v.summary;
}

void expect_hunt_keeps_the_scenario(const EngineUnderTest& subject) {
  rcgen::HuntOptions options;
  options.max_cases = 200;
  options.traits = subject.traits;
  const rcgen::HuntResult r = rcgen::hunt(
      [&](const Scenario& s) { return check_property(Property::kCompaction, s, subject); },
      rcgen::emphasis_for(Property::kCompaction), options);
  ASSERT_TRUE(r.failed) << "no failure in " << r.cases_run << " cases";
  ASSERT_TRUE(r.counterexample.has_value());
  EXPECT_FALSE(r.verdict.passed);
  EXPECT_NE(r.verdict.summary.find("map::at"), std::string::npos) << r.verdict.summary;
  bool finishes = false;
  for (const Call& c : r.counterexample->calls)
    finishes = finishes || c.kind == Call::Kind::kFinish;
  EXPECT_TRUE(finishes) << r.counterexample->to_text();
}

TEST(EngineFailure, AHuntOnAThrowingFinishKeepsACounterexample) {
  expect_hunt_keeps_the_scenario(finish_throws());
}

TEST(EngineFailure, AHuntOnAPluginsInternalErrorKeepsACounterexample) {
  expect_hunt_keeps_the_scenario(finish_internal_error_plugin());
}

// A failing property that costs nothing: a scenario fails when it has a finish.
Verdict fails_with_a_finish(const Scenario& s) {
  Verdict v;
  v.passed = true;
  for (const Call& c : s.calls) v.passed = v.passed && c.kind != Call::Kind::kFinish;
  v.summary = v.passed ? "" : "a finish";
  return v;
}

TEST(EngineFailure, AShrinkStepBudgetKeepsTheSmallestFailureFoundSoFar) {
  rcgen::HuntOptions options;
  options.max_cases = 200;
  const rcgen::HuntResult shrunk = rcgen::hunt(fails_with_a_finish, rcgen::Emphasis::kAny, options);
  ASSERT_TRUE(shrunk.failed);
  EXPECT_EQ(shrunk.shrinks_skipped, 0);
  EXPECT_GT(shrunk.shrink_steps, 3);
  EXPECT_GT(shrunk.failing_evaluations, 1);  // shrinks accepted

  options.max_shrink_steps = 3;
  const rcgen::HuntResult stopped =
      rcgen::hunt(fails_with_a_finish, rcgen::Emphasis::kAny, options);
  ASSERT_TRUE(stopped.failed);
  ASSERT_TRUE(stopped.counterexample.has_value());
  EXPECT_FALSE(stopped.cut) << "a step budget is the run's own, not a cut";
  EXPECT_EQ(stopped.shrink_steps, 3);
  EXPECT_GT(stopped.shrinks_skipped, 0);
  EXPECT_EQ(stopped.evaluations, stopped.cases_run + 3);
  EXPECT_EQ(stopped.cases_run, shrunk.cases_run);
  EXPECT_FALSE(fails_with_a_finish(*stopped.counterexample).passed);
  EXPECT_GE(stopped.counterexample->size(), shrunk.counterexample->size());
  // The same budget shrinks to the same case: no clock decides it.
  const rcgen::HuntResult again = rcgen::hunt(fails_with_a_finish, rcgen::Emphasis::kAny, options);
  EXPECT_EQ(again.counterexample, stopped.counterexample);
}

TEST(EngineFailure, AStopAfterTheFirstFailureCutsTheShrinkAndSaysSo) {
  bool failed_once = false;
  rcgen::HuntOptions options;
  options.max_cases = 200;
  options.stop = [&] { return failed_once; };
  const rcgen::HuntResult stopped = rcgen::hunt(
      [&](const Scenario& s) {
        Verdict v = fails_with_a_finish(s);
        failed_once = failed_once || !v.passed;
        return v;
      },
      rcgen::Emphasis::kAny, options);
  ASSERT_TRUE(stopped.failed);
  EXPECT_TRUE(stopped.cut);
  EXPECT_EQ(stopped.failing_evaluations, 1);  // the first failure only
  EXPECT_EQ(stopped.evaluations, stopped.cases_run);
  EXPECT_GT(stopped.shrinks_skipped, 0);
}

TEST(EngineFailure, APassedDeadlineRunsNothingAndSaysSo) {
  rcgen::HuntOptions options;
  options.max_cases = 50;
  options.deadline = std::chrono::steady_clock::now();
  const rcgen::HuntResult r = rcgen::hunt(fails_with_a_finish, rcgen::Emphasis::kAny, options);
  EXPECT_FALSE(r.failed);
  EXPECT_TRUE(r.cut);
  EXPECT_EQ(r.cases_run, 0);
  EXPECT_EQ(r.evaluations, 0);
}

}  // namespace
}  // namespace kvcheck
