#include "properties/rc/hunt.h"

#include "properties/repro/shrink.h"

#include <chrono>
#include <iostream>
#include <sstream>

#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>

namespace kvcheck::rcgen {

Emphasis emphasis_for(Property property) {
  switch (property) {
    case Property::kGqa:
      return Emphasis::kSharedKvHeads;
    case Property::kSharing:
      return Emphasis::kForks;
    case Property::kRollback:
      return Emphasis::kTruncations;
    case Property::kPrefix:
      return Emphasis::kPrefixCache;
    case Property::kCompaction:
      return Emphasis::kSeveralSequences;
    default:
      return Emphasis::kAny;
  }
}

namespace {

// RapidCheck's default listener remembers every failing property and, at
// exit, prints how to reproduce it; failures on faulty engines are the
// expected outcome here, so they go to a listener that stays silent.
class SilentListener : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// The second stage of shrinking (HuntOptions::scenario_shrink_steps).
// Candidates not run for time count as passing, and the result says cut.
void shrink_scenario_further(const std::function<Verdict(const Scenario&)>& check,
                             const HuntOptions& options, const std::function<bool()>& out_of_time,
                             HuntResult& result) {
  if (options.scenario_shrink_steps <= 0) return;
  ShrinkOptions shrink;
  shrink.max_evaluations = options.scenario_shrink_steps;
  shrink.max_seconds = 1e9;  // steps, never seconds, bound it (the deadline cuts)
  const ShrinkResult r = shrink_scenario(
      *result.counterexample, result.verdict,
      [&](const Scenario& s) -> std::optional<Verdict> {
        if (out_of_time()) return std::nullopt;
        ++result.evaluations;
        ++result.shrink_steps;
        Verdict v = check(s);
        if (v.passed) return std::nullopt;
        ++result.failing_evaluations;
        return v;
      },
      shrink);
  result.cut = result.cut || out_of_time();
  if (r.size_after < r.size_before ||
      shrink_complexity(r.scenario) < shrink_complexity(*result.counterexample)) {
    result.counterexample = r.scenario;
    result.verdict = r.verdict;
  }
}

}  // namespace

// RapidCheck prints "Using configuration: seed=..." to stderr when it first
// reads RC_PARAMS: read it once, with stderr silenced.
void load_rapidcheck_configuration_quietly() {
  static const bool loaded = [] {
    std::streambuf* const err = std::cerr.rdbuf(nullptr);
    rc::detail::configuration();
    std::cerr.rdbuf(err);
    return true;
  }();
  (void)loaded;
}

HuntResult hunt(const std::function<Verdict(const Scenario&)>& check, Emphasis emphasis,
                const HuntOptions& options) {
  load_rapidcheck_configuration_quietly();
  HuntResult result;
  const rc::Gen<Scenario> scenarios =
      scenario(emphasis, options.traits, options.model, options.model_reuse);
  // RapidCheck evaluates the shrunk counterexample last (it re-runs the best
  // shrink to report it), so the last failing evaluation is the shrunk case.
  std::optional<Scenario> last_failing;
  Verdict last_failing_verdict;
  int evaluations = 0, failing_evaluations = 0, cases = 0, shrink_steps = 0, shrinks_skipped = 0;
  bool cut = false;
  const auto out_of_time = [&] {
    if (evaluations < options.evaluations_before_cut) return false;
    cut = cut || (options.stop && options.stop()) ||
          (options.deadline && std::chrono::steady_clock::now() >= *options.deadline);
    return cut;
  };
  const auto property = [&] {
    const Scenario s = *scenarios;
    const bool shrinking = last_failing.has_value();
    const bool budget_spent =
        shrinking && options.max_shrink_steps > 0 && shrink_steps >= options.max_shrink_steps;
    if (budget_spent || out_of_time()) {
      shrinks_skipped += shrinking;
      return;
    }
    ++evaluations;
    shrink_steps += shrinking;
    cases += !shrinking;
    Verdict v = check(s);
    if (!v.passed) {
      ++failing_evaluations;
      last_failing = s;
      last_failing_verdict = v;
      RC_FAIL(v.summary);
    }
  };

  rc::detail::TestParams params;
  params.seed = options.seed;
  params.maxSuccess = options.max_cases;
  params.maxSize = options.max_size;
  params.disableShrinking = !options.shrink;
  rc::detail::TestMetadata metadata;
  metadata.id = metadata.description = "kvcheck hunt";

  const auto begin = std::chrono::steady_clock::now();
  SilentListener listener;
  const rc::detail::TestResult outcome =
      rc::detail::checkTestable(property, metadata, params, listener);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  result.evaluations = evaluations;
  result.failing_evaluations = failing_evaluations;
  result.shrink_steps = shrink_steps;
  result.shrinks_skipped = shrinks_skipped;
  result.cut = cut;

  std::ostringstream message;
  rc::detail::printResultMessage(outcome, message);
  result.rapidcheck_message = message.str();
  rc::detail::FailureResult failure;
  result.cases_run = cases;
  if (outcome.match(failure)) {
    result.failed = true;
    result.counterexample = std::move(last_failing);
    result.verdict = std::move(last_failing_verdict);
    if (options.shrink && !cut) shrink_scenario_further(check, options, out_of_time, result);
  }
  return result;
}

}  // namespace kvcheck::rcgen
