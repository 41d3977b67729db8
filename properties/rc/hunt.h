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

// RapidCheck's configuration (RC_PARAMS) read once per process, without the
// "Using configuration: seed=..." line RapidCheck prints then: a seed that a
// hunt never uses (it passes its own) and that a conformance test prints
// itself with the command that reproduces it. Every driver calls this before
// anything reads the configuration.
void load_rapidcheck_configuration_quietly();

struct HuntOptions {
  uint64_t seed = 0x6b76636865636bull;  // "kvcheck"
  int max_cases = 100;
  int max_size = 100;
  bool shrink = true;
  // Shrink candidates run after the first failure; past it the smallest
  // failing case found so far is the result. A budget in steps, not seconds,
  // so that a build shrinks to the same case on every machine. 0: unbounded.
  int max_shrink_steps = 0;
  // Then the scenario-level shrinker (properties/repro/shrink.h) runs up to
  // this many candidates on RapidCheck's result: it edits the scenario
  // itself where RapidCheck can only shrink genes, so a case drawn with a
  // floor (a scenario for erase and shift holds 4+ prompt tokens) still
  // shrinks past it. 0: not run.
  int scenario_shrink_steps = 0;
  // Nothing is evaluated after this (a campaign's --time), nor once `stop`
  // says so (an interrupted run): cases and candidates not run count as not
  // failing, and the result says it was cut. The first
  // `evaluations_before_cut` evaluations run whatever the time (a worker's
  // hunt replayed after it died, up to the case that killed it).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::function<bool()> stop;
  int evaluations_before_cut = 0;
  EngineTraits traits = EngineTraits::strict();  // scenarios are drawn within them
  std::shared_ptr<const Checkpoint> model;       // --model: its config and weights; null: seeded
  std::shared_ptr<ModelReuse> model_reuse;       // several scenarios per model; null: one
};

struct HuntResult {
  bool failed = false;
  int cases_run = 0;            // until the first failure (inclusive), or all that ran
  int failing_evaluations = 0;  // the first failure, accepted shrinks and the final re-run
  int evaluations = 0;          // every property evaluation, the shrinking ones included
  double seconds = 0;
  std::optional<Scenario> counterexample;  // shrunk; set when failed
  Verdict verdict;                         // of the shrunk counterexample
  std::string rapidcheck_message;          // RapidCheck's own report
  int shrink_steps = 0;                    // candidates run after the first failure
  int shrinks_skipped = 0;  // candidates not run: the step budget was spent, or a cut
  // The deadline or `stop` ended it before its case or shrink budget did:
  // the run is incomplete (docs/REPORTS.md), never failed for it.
  bool cut = false;
};

// Runs `check` on up to max_cases scenarios from scenario(emphasis) under
// RapidCheck with the given seed, shrinking the first failure.
HuntResult hunt(const std::function<Verdict(const Scenario&)>& check, Emphasis emphasis,
                const HuntOptions& options);

}  // namespace kvcheck::rcgen
