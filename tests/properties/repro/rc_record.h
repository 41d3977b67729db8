// How a RapidCheck-driven ctest turns its failure into a case file: keep the
// last failing scenario (RapidCheck evaluates the shrunk counterexample last),
// and write only that one once checkTestable returns a failure. Writing from
// inside the property would write one file per failing shrink step.
// conformance/rc_driver.h can do the same in check_scenarios().
#pragma once

#include <optional>
#include <sstream>
#include <string>

#include <rapidcheck.h>

#include "backends/in_tree.h"
#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"

namespace kvcheck::test {

// For runs whose failure is the expected outcome: RapidCheck's default
// listener would print a "reproduce" line for it at exit.
class SilentRcListener : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

struct RecordedRun {
  bool failed = false;
  std::string rapidcheck_message;
  std::optional<Scenario> counterexample;
  Verdict verdict;
  WrittenCase written;  // set when failed
};

// Checks `property` on `cases` generated scenarios with RapidCheck seed
// `seed`; on failure writes the shrunk counterexample as a case file.
inline RecordedRun check_and_record(Property property, FaultSet faults, int cases, uint64_t seed,
                                    FailureContext context) {
  const EngineFactory factory = cpu_engine_factory(faults);
  const rc::Gen<Scenario> scenarios = rcgen::scenario(rcgen::emphasis_for(property));
  RecordedRun run;
  const auto body = [&] {
    const Scenario s = *scenarios;
    Verdict v = check_property(property, s, factory);
    if (!v.passed) {
      run.counterexample = s;
      run.verdict = v;
      RC_FAIL(v.summary);
    }
  };
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = cases;
  rc::detail::TestMetadata metadata;
  metadata.id = metadata.description = "check_and_record";
  SilentRcListener listener;
  const rc::detail::TestResult result = rc::detail::checkTestable(body, metadata, params, listener);
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  run.rapidcheck_message = message.str();
  rc::detail::FailureResult failure;
  if (result.match(failure) && run.counterexample) {
    run.failed = true;
    if (context.reproduce.empty()) {
      context.reproduce = "RC_PARAMS=\"seed=" + std::to_string(seed) + "\"";
    }
    run.written = write_failure_case(*run.counterexample, run.verdict, faults, context);
  }
  return run;
}

}  // namespace kvcheck::test
