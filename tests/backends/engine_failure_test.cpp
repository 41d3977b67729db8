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
#include "tests/property_units/test_scenarios.h"

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

}  // namespace
}  // namespace kvcheck
