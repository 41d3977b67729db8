// P15 prefix: a sequence whose first chunk hit the prefix cache gives the
// logits of a cold replay of the same content on a fresh engine, nothing
// cached (a warm hit against a cold run, SGLang #34683; common/replay.h).
#include <algorithm>

#include "properties/common/replay.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

Verdict check_prefix(const Context& context) {
  static constexpr ReplayKind kPrefix{
      .property = Property::kPrefix,
      // Which sequences hit is what the engine did: it says so in its run.
      .selects_by_run = true,
      .involved = [](const SchedulePlan&, const RunResult& run, size_t s) -> bool {
        return s < run.reused.size() &&
               std::find(run.reused[s].begin(), run.reused[s].end(), true) != run.reused[s].end();
      },
      .none_selected = "no sequence's first chunk hit the prefix cache",
      .replay = "a cold replay (fresh engine, nothing cached)",
      .passed = " prefix-cache hits equal their cold replays"};
  if (!context.scenario.prefix_cache) {
    return not_applicable(Property::kPrefix, "the scenario has no prefix cache (prefix_cache 0)");
  }
  return check_replay(context, kPrefix);
}

}  // namespace kvcheck::checks
