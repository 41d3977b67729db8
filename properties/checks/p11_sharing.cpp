// P11 sharing: forks are isolated both ways. Every fed sequence that forks
// or is forked gives the logits of a replay of its content that never
// shared storage (common/replay.h).
#include "properties/common/replay.h"

namespace kvcheck::checks {

Verdict check_sharing(const Context& context) {
  static constexpr ReplayKind kSharing{
      .property = Property::kSharing,
      .selects_by_run = false,
      .involved = [](const SchedulePlan& plan, const RunResult&, size_t s) -> bool {
        return plan.forked[s] || plan.forked_from[s] >= 0;
      },
      .none_selected = "no fed sequence forks or is forked",
      .replay = "a replay that never shared storage",
      .passed = " sequences equal their replays"};
  return check_replay(context, kSharing);
}

}  // namespace kvcheck::checks
