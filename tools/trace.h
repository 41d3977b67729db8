// `kvcheck replay --trace`: the cache's shape after every call of a scenario,
// in the lesson's notation [batch, kv_heads, cached_len, head_dim], one line
// per running sequence and layer, with the positions the call wrote.
//
// batch is 1 on every line: a line describes one sequence's cache, and the
// sequences of a ragged batch have different lengths, so no rectangular
// [batch, ...] tensor holds them. cached_len is what the engine reports
// (Engine::length); kv_heads and head_dim come from Engine::config(). Only the
// Engine interface is used, so the trace works on every backend.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "properties/property.h"
#include "properties/runner.h"
#include "properties/scenario.h"

namespace kvcheck::cli {

// The lines after call `call_index` of the runner's scenario (the hook's view).
std::vector<std::string> cache_shape_lines(const Scenario& scenario, int call_index,
                                           const ScenarioRunner& runner);

// Runs the scenario once on a fresh engine and returns its trace: for each
// call a header "after call N (LABEL):" and its lines; where the engine
// refuses a call, a line naming the call and the error ends it.
std::vector<std::string> cache_trace(const Scenario& scenario, const EngineFactory& factory,
                                     const std::function<std::string(const Call&)>& call_label);

}  // namespace kvcheck::cli
