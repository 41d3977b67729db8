// What one engine process has checked: an exec: backend's child serves case
// after case, so a failure there may need the cases before it (an engine that
// leaks state between cases). A campaign records every check it runs on the
// backend, the shrinking ones included, and hands the record to
// report_failure, which looks there for the cases a failure needs when it
// does not fail alone in a fresh process (tools/leak_search.h).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

#include "properties/property.h"
#include "properties/repro/case_file.h"

namespace kvcheck::cli {

class CaseHistory {
 public:
  // Cases kept before a failure: a failure's shrinking re-runs it last, so
  // what it needs lies just before.
  static constexpr size_t kMaxCases = 64;

  // The record of `subject`'s engine process. An in-process subject makes its
  // engines anew for every case: nothing is recorded.
  explicit CaseHistory(EngineUnderTest subject);

  // After each check of `subject`: the case and its verdict. A child that
  // was restarted since the last check (it died) starts the record anew.
  void record(Property property, const Scenario& scenario, const Verdict& verdict);

  // The cases the process checked before the most recent failing check, if
  // that was `property` on `scenario` (a hunt's counterexample is its last
  // failing check), oldest first, at most kMaxCases; else none.
  std::vector<PreludeCase> before_failure(Property property, const Scenario& scenario) const;

  // The subject it records; fresh processes take its traits and reference.
  const EngineUnderTest& subject() const { return subject_; }

 private:
  struct Failure {
    PreludeCase failed;
    std::vector<PreludeCase> before;  // oldest first
  };
  EngineUnderTest subject_;
  std::optional<int> generation_;   // of the process recorded; unset: nothing to record
  std::deque<PreludeCase> recent_;  // [case] the last kMaxCases checked, oldest first
  // Kept apart from recent_: the checks after it (the shrinker's passing
  // candidates, often more than kMaxCases) would push out what it needs.
  std::optional<Failure> last_failure_;
};

}  // namespace kvcheck::cli
