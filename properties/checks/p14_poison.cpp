// P14 poison: after every call, storage no sequence holds is poisoned
// (NaN), so a later read past a sequence's length shows in its logits.
#include <algorithm>

#include "properties/common/context.h"
#include "properties/common/every_call.h"
#include "properties/common/verdicts.h"
#include "properties/schedule/operation.h"

namespace kvcheck::checks {

Verdict check_poison(const Context& context) {
  const Scenario& scenario = context.scenario;
  const bool releases = std::any_of(scenario.calls.begin(), scenario.calls.end(),
                                    [](const Call& c) { return operation(c.kind).releases; });
  // A prefix cache (or a pool that runs dry) also frees blocks inside steps:
  // evictions.
  if (!releases && !scenario.prefix_cache) {
    return not_applicable(Property::kPoison, "no finish, reset, fork or truncation moves storage");
  }
  return check_after_every_call(
      Property::kPoison, context,
      [](int, const ScenarioRunner& runner) { return runner.engine().unheld_storage_check(); },
      "storage that no sequence holds must be poisoned again (NaN) when it is freed "
      "(finish, reset, a block's last reference, a truncated tail, an eviction or flush of "
      "a cached block), so that a later read past a length shows; a cached block keeps its "
      "data (docs/OPERATIONS.md)\n",
      "unheld storage poisoned after every call");
}

}  // namespace kvcheck::checks
