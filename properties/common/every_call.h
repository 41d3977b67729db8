// P13 and P14 share one shape: run the scenario once and ask, after every
// call, what is wrong with the engine's state. This is that run.
#pragma once

#include <functional>
#include <string>

#include "properties/common/context.h"

namespace kvcheck::checks {

// Runs the scenario once and asks `problem_after` after every call; the
// first problem fails `property` with `rule` as the detail.
Verdict check_after_every_call(
    Property property, const Context& context,
    const std::function<std::string(int call, const ScenarioRunner&)>& problem_after,
    const std::string& rule, const std::string& passed);

}  // namespace kvcheck::checks
