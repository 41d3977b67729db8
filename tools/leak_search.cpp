#include "tools/leak_search.h"

#include <algorithm>
#include <exception>

#include "tools/fresh_child.h"

namespace kvcheck::cli {

namespace {

// Removes runs of cases while the case still fails without them: halves
// first, then quarters, down to single cases (the complement step of delta
// debugging), so a prelude of one case among many costs a few runs per
// halving instead of one per case.
void drop_unneeded(PreludeFound& found, const FailsAfter& fails_after, int max_runs, int& runs) {
  for (size_t chunk = found.prelude.size() / 2; chunk >= 1 && runs < max_runs; chunk /= 2) {
    for (size_t begin = 0; begin < found.prelude.size() && runs < max_runs;) {
      const size_t end = std::min(begin + chunk, found.prelude.size());
      if (end - begin == found.prelude.size()) break;  // never the whole prelude
      std::vector<PreludeCase> without = found.prelude;
      without.erase(without.begin() + std::ptrdiff_t(begin), without.begin() + std::ptrdiff_t(end));
      ++runs;
      if (std::optional<Verdict> v = fails_after(without))
        found = {std::move(without), std::move(*v)};
      else
        begin = end;
    }
  }
}

std::string label(Property p) {
  return std::string(property_label(p)) + " " + std::string(property_name(p));
}

}  // namespace

std::optional<PreludeFound> shortest_prelude(const std::vector<PreludeCase>& earlier,
                                             const FailsAfter& fails_after, int max_runs,
                                             int& runs) {
  std::optional<PreludeFound> found;
  for (size_t k = 1; !found && k <= earlier.size() && runs < max_runs; k *= 2) {
    k = std::min(k, earlier.size());
    const std::vector<PreludeCase> last(earlier.end() - std::ptrdiff_t(k), earlier.end());
    ++runs;
    if (std::optional<Verdict> v = fails_after(last)) found = PreludeFound{last, std::move(*v)};
    if (k == earlier.size()) break;
  }
  if (found) drop_unneeded(*found, fails_after, max_runs, runs);
  return found;
}

Confirmation confirm_in_fresh_process(const EngineUnderTest& subject, Property property,
                                      const Scenario& scenario, const CaseHistory* history) {
  Confirmation c;
  c.recorded = history != nullptr;
  const FailsAfter fails_after =
      [&](std::span<const PreludeCase> prelude) -> std::optional<Verdict> {
    ++c.runs;
    c.verdict = check_after_prelude(subject, prelude, property, scenario).verdict;
    if (c.verdict.passed) return std::nullopt;
    return c.verdict;
  };
  try {
    if (fails_after({})) {
      c.outcome = Confirmation::Outcome::kFailsAlone;
      return c;
    }
    if (!c.verdict.applicable) {
      c.why = "the case does not apply there: " + c.verdict.summary;
      return c;
    }
    const Verdict alone = c.verdict;
    c.alone = alone.summary;
    const std::vector<PreludeCase> earlier =
        history ? history->before_failure(property, scenario) : std::vector<PreludeCase>{};
    c.earlier = earlier.size();
    int runs = 1;  // the run alone
    std::optional<PreludeFound> found =
        shortest_prelude(earlier, fails_after, kMaxFreshRuns - 1, runs);
    c.outcome = Confirmation::Outcome::kNotReproduced;
    if (!found) {
      c.verdict = alone;
      return c;
    }
    // Once more, as replay will run it: the same verdict, or the engine is
    // not deterministic and the file would not say what replay sees.
    const std::optional<Verdict> again = fails_after(found->prelude);
    if (!again || record_verdict(*again) != record_verdict(found->verdict)) {
      c.why = "after the prelude found it failed once (" + found->verdict.summary +
              "), then gave " + (again ? "another verdict" : "a pass") + " on the same run";
      return c;
    }
    c.outcome = Confirmation::Outcome::kLeak;
    c.prelude = std::move(found->prelude);
  } catch (const std::exception& e) {
    c.outcome = Confirmation::Outcome::kNotRerun;
    c.why = e.what();
  }
  return c;
}

namespace {

std::string fresh_processes(int runs) {
  return std::to_string(runs) + " fresh process" + (runs == 1 ? "" : "es");
}

std::string leak_report(const Confirmation& c) {
  std::string out =
      "STATE LEAK between cases: the minimized case passes in a fresh engine process (" + c.alone +
      "), and fails there after " + std::to_string(c.prelude.size()) + " of the " +
      std::to_string(c.earlier) + " cases that ran before it in the same process (found in " +
      fresh_processes(c.runs) + "):\n";
  for (size_t i = 0; i < c.prelude.size(); ++i)
    out += "  prelude " + std::to_string(i + 1) + ": " + label(c.prelude[i].property) + ", size " +
           std::to_string(c.prelude[i].scenario.size()) + "\n";
  return out + "after them: " + c.verdict.summary +
         "\nthe case file records them as its prelude; replay runs them first, in a fresh "
         "process\n";
}

// Why no case file: a leak whose cases were not found, or a failure that does
// not reproduce at all (an engine that is not deterministic, or that depends
// on something besides the cases: a file, the clock).
std::string not_reproduced_report(const Confirmation& c) {
  std::string out =
      "STATE LEAK between cases, or a failure that does not reproduce: the "
      "minimized case passes in a fresh engine process (" +
      c.alone + "); ";
  if (!c.recorded)
    out +=
        "the cases that ran before it were not recorded (report_failure was given no "
        "CaseHistory)";
  else if (!c.why.empty())
    out += "it does not fail the same way twice: " + c.why;
  else if (c.earlier == 0)
    out += "no case ran before it in that process since it started";
  else
    out += "no list tried of the " + std::to_string(c.earlier) +
           " cases that ran before it in the same process makes it fail again (" +
           fresh_processes(c.runs) + ")";
  return out + "; no case file written, since it would not reproduce\n";
}

}  // namespace

std::string confirmation_report(const Confirmation& c) {
  switch (c.outcome) {
    case Confirmation::Outcome::kFailsAlone:
      return "confirmed in a fresh engine process: " + c.verdict.summary + "\n";
    case Confirmation::Outcome::kLeak:
      return leak_report(c);
    case Confirmation::Outcome::kNotReproduced:
      return not_reproduced_report(c);
    case Confirmation::Outcome::kNotRerun:
      break;
  }
  return "could not re-run the case in a fresh engine process (" + c.why +
         "); no case file written, since it could not be shown to reproduce\n";
}

}  // namespace kvcheck::cli
