// The comparison of a sequence with its replay (replay.h says why it is
// shared by P11, P12 and P15).
#include "properties/common/replay.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

std::vector<size_t> select(const Context& context, const ReplayKind& kind, const RunResult& run) {
  const SchedulePlan& plan = context.plan;
  std::vector<size_t> selected;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    const bool involved = kind.involved(plan, run, s);
    // An erased or shifted sequence's cache is not a replay of its content
    // (the kept K/V saw the erased context): P1 and P6 check it instead.
    if (plan.shifted[s]) continue;
    const bool fed_kept =
        std::any_of(plan.content_stream[s].begin(), plan.content_stream[s].end(),
                    [&](int k) { return k >= 0 && !reused_at(run, s, size_t(k)); });
    if (involved && fed_kept) selected.push_back(s);
  }
  return selected;
}

// Sequence s of the scenario's `run` against its replay; fills the verdict
// and returns false on the first difference or a refused replay.
bool matches_replay(Verdict& verdict, const Context& context, const ReplayKind& kind,
                    const RunResult& run, size_t s, Invariance invariance) {
  const SchedulePlan& plan = context.plan;
  const size_t V = size_t(context.vocab);
  const std::vector<int32_t>& content = plan.content[s];
  const SoloRun solo = run_solo(context, content, plan.content_chunks[s]);
  if (solo.run.engine_failed) {
    verdict = engine_refused(kind.property, solo.run, "the replay of s" + std::to_string(s));
    return false;
  }
  if (solo.pool_ran_dry()) return true;
  // The scenario's logits at the positions it fed itself; the inherited
  // prefix has none and takes the replay's, and so do reused tokens.
  std::vector<float> got = solo.logits;  // [position][V]
  for (size_t p = 0; p < content.size(); ++p) {
    const int k = plan.content_stream[s][p];
    if (k < 0 || reused_at(run, s, size_t(k))) continue;
    std::copy_n(run.logits[s].begin() + std::ptrdiff_t(size_t(k) * V), V,
                got.begin() + std::ptrdiff_t(p * V));
  }
  const std::optional<size_t> at =
      first_difference(context, invariance, content, solo.logits, got, &verdict.worst_ratio);
  if (!at) return true;
  Location where;
  where.sequence = static_cast<int>(s);
  where.position = static_cast<int>(*at / V);
  // A position inherited from a parent was fed by no call of this
  // sequence: only a non-finite replay value fails there.
  const int k = plan.content_stream[s][size_t(where.position)];
  where.call = k >= 0 ? plan.call_of_position[s][size_t(k)] : -1;
  const std::string replay = kind.replay;
  std::ostringstream detail;
  detail << "s" << s << " position " << where.position << " vocab " << *at % V << " (fed by call "
         << where.call << ")\n  " << replay << " (chunks "
         << describe_chunks(plan.content_chunks[s]) << "): " << float_with_bits(solo.logits[*at])
         << "\n  the scenario: " << float_with_bits(got[*at]) << "\n";
  if (plan.forked_from[s] >= 0)
    detail << "  s" << s << " was forked from s" << plan.forked_from[s] << "\n";
  if (invariance == Invariance::kBounded) detail << "  (compared within 2B)\n";
  fail(verdict, where,
       "s" + std::to_string(s) + " position " + std::to_string(where.position) + ": " +
           disagreement(solo.logits, replay, got, "the scenario", *at, where.call,
                        "logits differ from " + replay),
       detail.str());
  return false;
}

}  // namespace

Verdict check_replay(const Context& context, const ReplayKind& kind) {
  Verdict verdict = start_verdict(kind.property);
  RunResult run;
  if (kind.selects_by_run) {
    run = scenario_run(context);
    if (run.engine_failed) return engine_refused(kind.property, run, "the scenario");
  }
  const std::vector<size_t> selected = select(context, kind, run);
  if (selected.empty()) return not_applicable(kind.property, kind.none_selected);
  if (!kind.selects_by_run) {
    run = scenario_run(context);
    if (run.engine_failed) return engine_refused(kind.property, run, "the scenario");
  }
  const Invariance invariance = invariance_for(context, kind.property);
  for (const size_t s : selected) {
    if (!matches_replay(verdict, context, kind, run, s, invariance)) return verdict;
  }
  pass(verdict, std::to_string(selected.size()) + kind.passed);
  return verdict;
}

}  // namespace kvcheck::checks
