// P12 rollback: a truncated sequence gives the logits of a replay of its
// content that never fed the tokens it forgot (common/replay.h).
#include "properties/common/replay.h"

namespace kvcheck::checks {

Verdict check_rollback(const Context& context) {
  static constexpr ReplayKind kRollback{
      .property = Property::kRollback,
      .selects_by_run = false,
      .involved = [](const SchedulePlan& plan, const RunResult&, size_t s) -> bool {
        return plan.truncated[s];
      },
      .none_selected = "no truncated sequence keeps a token it was fed",
      .replay = "a replay that never fed the forgotten tokens",
      .passed = " sequences equal their replays"};
  return check_replay(context, kRollback);
}

}  // namespace kvcheck::checks
