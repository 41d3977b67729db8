// P5 compaction: sequences that run while another finishes (and the
// engine may compact its rows) give the logits of their solo runs.
#include <vector>

#include "properties/common/against_solo.h"

namespace kvcheck::checks {

Verdict check_compaction(const Context& context) {
  const size_t n = context.scenario.sequences.size();
  std::vector<bool> selected(n, false);
  for (size_t c = 0; c < context.scenario.calls.size(); ++c) {
    const Call& call = context.scenario.calls[c];
    if (call.kind != Call::Kind::kFinish) continue;
    const int ci = static_cast<int>(c);
    for (size_t s = 0; s < n; ++s) {
      const bool started = context.plan.start_call[s] >= 0 && context.plan.start_call[s] < ci;
      const bool still = context.plan.end_call[s] < 0 || context.plan.end_call[s] > ci;
      if (started && still) selected[s] = true;
    }
  }
  return check_selected_against_solo(context, Property::kCompaction, selected,
                                     "no fed sequence runs while another finishes",
                                     "running across a finish");
}

}  // namespace kvcheck::checks
