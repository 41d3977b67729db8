// The scenario-against-solo comparison of P3, P4 and P5 (against_solo.h).
#include "properties/common/against_solo.h"

#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

bool scenario_matches_solo(Verdict& verdict, const Context& context, const RunResult& run,
                           const std::vector<bool>& selected, const std::string& why) {
  for (size_t s = 0; s < selected.size(); ++s) {
    if (!selected[s] || context.plan.fed[s] == 0 || !context.plan.plain[s]) continue;
    const int sequence = static_cast<int>(s);
    const SoloRun solo = run_solo(context, fed_tokens(context, sequence), context.plan.chunks[s]);
    if (solo.run.engine_failed) {
      verdict = engine_refused(verdict.property, solo.run, "the solo run of s" + std::to_string(s));
      return false;
    }
    if (solo.pool_ran_dry()) continue;
    if (!same_logits(verdict, context, sequence, solo.logits, "its solo run on a fresh engine",
                     run.logits[s], "the scenario (" + why + ")",
                     s < run.reused.size() ? run.reused[s] : std::vector<bool>())) {
      return false;
    }
  }
  return true;
}

int count_fed(const Context& context, const std::vector<bool>& selected) {
  int n = 0;
  for (size_t s = 0; s < selected.size(); ++s) {
    n += selected[s] && context.plan.fed[s] > 0 && context.plan.plain[s];
  }
  return n;
}

Verdict check_selected_against_solo(const Context& context, Property property,
                                    const std::vector<bool>& selected, const std::string& none,
                                    const std::string& why) {
  Verdict verdict = start_verdict(property);
  const int count = count_fed(context, selected);
  if (count == 0) return not_applicable(property, none);
  const RunResult run = scenario_run(context);
  if (run.engine_failed) return engine_refused(property, run, "the scenario");
  if (!scenario_matches_solo(verdict, context, run, selected, why)) return verdict;
  pass(verdict, std::to_string(count) + " sequences " + why);
  return verdict;
}

}  // namespace kvcheck::checks
