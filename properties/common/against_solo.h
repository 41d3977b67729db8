// P3, P4 and P5 check the same thing of different sequences: that a
// sequence's logits in the scenario equal its solo run on a fresh engine.
// Each selects its sequences; this is the comparison they share.
#pragma once

#include <string>
#include <vector>

#include "properties/common/context.h"

namespace kvcheck::checks {

// Compares the scenario's logits of every selected sequence with its solo run
// on a fresh engine under the same chunking.
bool scenario_matches_solo(Verdict& verdict, const Context& context, const RunResult& run,
                           const std::vector<bool>& selected, const std::string& why);

// How many selected sequences are fed and plain (those it compares).
int count_fed(const Context& context, const std::vector<bool>& selected);

// P4's and P5's whole check: not applicable (`none`) when no selected
// sequence is compared, else the scenario's run against the solo runs of
// the `selected` sequences, which are "sequences <why>" in its texts.
Verdict check_selected_against_solo(const Context& context, Property property,
                                    const std::vector<bool>& selected, const std::string& none,
                                    const std::string& why);

}  // namespace kvcheck::checks
