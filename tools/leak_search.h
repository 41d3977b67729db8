// Before a failure on an exec: backend becomes a case file, its case runs
// again in a fresh engine process, as replay will run it. If it passes there,
// the failure needed cases that ran before it in the same process (a state
// leak between cases), or it does not reproduce at all. The shortest list of
// those earlier cases found to make it fail again becomes the case file's
// prelude; when none does, no case file is written, since it would not
// reproduce.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "properties/property.h"
#include "properties/repro/case_file.h"
#include "tools/case_history.h"

namespace kvcheck::cli {

// Fresh processes one confirmation may start: the case alone, the search
// and the final re-run (a budget in runs, never in seconds, so that the
// verdict does not depend on the machine).
inline constexpr int kMaxFreshRuns = 32;

// The case's failing verdict after `prelude` in a fresh process, or nullopt
// when it passes (or does not apply) there.
using FailsAfter = std::function<std::optional<Verdict>(std::span<const PreludeCase> prelude)>;

struct PreludeFound {
  std::vector<PreludeCase> prelude;  // oldest first
  Verdict verdict;                   // the case's failing verdict after it
};

// Searches `earlier` (oldest first; the failure came right after the last)
// for a short list after which the case fails: the last case alone, then the
// last 2, 4, 8, ... cases; from the first that fails, halves, quarters, ...
// and single cases are dropped while it still fails. At most `max_runs`
// calls of `fails_after` in all; `runs` counts them.
std::optional<PreludeFound> shortest_prelude(const std::vector<PreludeCase>& earlier,
                                             const FailsAfter& fails_after, int max_runs,
                                             int& runs);

struct Confirmation {
  enum class Outcome {
    kFailsAlone,     // it fails in a fresh process: written as it is
    kLeak,           // it fails there after `prelude`: written with it
    kNotReproduced,  // it passes there, and no prelude tried fails it: not written
    kNotRerun,       // it could not run in a fresh process: not written
  };
  Outcome outcome = Outcome::kNotRerun;
  Verdict verdict;                   // the last fresh run of the case
  std::string alone;                 // the summary of its run alone, where it passed
  std::vector<PreludeCase> prelude;  // kLeak
  size_t earlier = 0;                // cases recorded before the failure
  bool recorded = false;             // a CaseHistory was given
  int runs = 0;                      // fresh processes started
  std::string why;                   // kNotRerun, or a kNotReproduced that was not stable
};

// Re-runs `property` on the failing `scenario` of `subject` (an exec:
// backend) in fresh processes, searching `history` when it passes alone.
Confirmation confirm_in_fresh_process(const EngineUnderTest& subject, Property property,
                                      const Scenario& scenario, const CaseHistory* history);

// What the confirmation found, for the run's output: lines ending in '\n'.
std::string confirmation_report(const Confirmation& c);

}  // namespace kvcheck::cli
