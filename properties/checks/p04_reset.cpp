// P4 reset: a sequence started after a reset or a finish (in a reused row,
// after a reused position counter) gives the logits of a fresh engine.
#include <vector>

#include "properties/common/against_solo.h"

namespace kvcheck::checks {

Verdict check_reset(const Context& context) {
  const size_t n = context.scenario.sequences.size();
  // A sequence started after a finish or a reset may land in a row (or a
  // position counter) an earlier sequence used.
  std::vector<bool> selected(n, false);
  int first_release = -1;
  for (size_t c = 0; c < context.scenario.calls.size(); ++c) {
    const Call& call = context.scenario.calls[c];
    if (call.kind == Call::Kind::kFinish || call.kind == Call::Kind::kReset) {
      if (first_release < 0) first_release = static_cast<int>(c);
    }
  }
  for (size_t s = 0; s < n; ++s) {
    selected[s] = first_release >= 0 && context.plan.start_call[s] > first_release;
  }
  return check_selected_against_solo(context, Property::kReset, selected,
                                     "no fed sequence starts after a reset or finish",
                                     "started after a reset or finish");
}

}  // namespace kvcheck::checks
