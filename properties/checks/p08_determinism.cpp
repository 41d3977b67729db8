// P8 determinism: the same scenario run twice on fresh engines gives the
// same logits (bitwise, or within 2B where the engine declares it bounded).
#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

Verdict check_determinism(const Context& context) {
  Verdict verdict = start_verdict(Property::kDeterminism);
  const RunResult first = scenario_run(context);
  const RunResult second = run_scenario(context.scenario, context.weights, context.factory);
  if (first.engine_failed || second.engine_failed) {
    return engine_refused(Property::kDeterminism, first.engine_failed ? first : second,
                          first.engine_failed ? "the first run" : "the second run");
  }
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    if (!same_logits(verdict, context, static_cast<int>(s), first.logits[s], "the first run",
                     second.logits[s], "the second run", reused_in_either(first, second, s))) {
      return verdict;
    }
  }
  pass(verdict, "two runs gave the same bits");
  return verdict;
}

}  // namespace kvcheck::checks
