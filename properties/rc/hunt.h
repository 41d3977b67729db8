// Programmatic RapidCheck runs with a fixed seed and case bound, keeping the
// shrunk counterexample as a Scenario (not just its printed text): the kill
// matrix and the property suite both drive properties through here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/scenario.h"

namespace kvcheck::rcgen {

// The generator each property is checked on: P7 needs shared KV heads, the
// others take every shape.
Emphasis emphasis_for(Property property);

struct HuntOptions {
  uint64_t seed = 0x6b76636865636bull;  // "kvcheck"
  int max_cases = 100;
  int max_size = 100;
  bool shrink = true;
  // Shrinking stops here: later candidates are not run (counted as not
  // failing), so the smallest failing case found so far is the result. A
  // crashing child engine costs a restart per candidate, which made a
  // campaign's shrinking outlast its budget. Unset: no deadline.
  std::optional<std::chrono::steady_clock::time_point> shrink_deadline;
  EngineTraits traits = EngineTraits::strict();  // scenarios are drawn within them
  std::shared_ptr<const Checkpoint> model;       // --model: its config and weights; null: seeded
};

struct HuntResult {
  bool failed = false;
  int cases_run = 0;            // until the first failure (inclusive), or all when none failed
  int failing_evaluations = 0;  // the first failure, accepted shrinks and the final re-run
  int evaluations = 0;          // every property evaluation, the shrinking ones included
  double seconds = 0;
  std::optional<Scenario> counterexample;  // shrunk; set when failed
  Verdict verdict;                         // of the shrunk counterexample
  std::string rapidcheck_message;          // RapidCheck's own report
  int shrinks_skipped = 0;                 // candidates not run because the shrink deadline passed
};

// Runs `check` on up to max_cases scenarios from scenario(emphasis) under
// RapidCheck with the given seed, shrinking the first failure.
HuntResult hunt(const std::function<Verdict(const Scenario&)>& check, Emphasis emphasis,
                const HuntOptions& options);

}  // namespace kvcheck::rcgen
