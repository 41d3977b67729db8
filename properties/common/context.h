// What every property's check reads about its scenario, computed once per
// check, and the runs of the scenario (and of one sequence alone) that the
// checks compare. Kept apart from the properties so that each property's
// file holds only what it checks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "properties/property.h"
#include "properties/runner.h"

namespace kvcheck::checks {

// Everything a property needs about the scenario, computed once.
struct Context {
  const Scenario& scenario;
  const EngineUnderTest& subject;
  const EngineFactory& factory;  // subject.factory
  const Weights& weights;        // scenario_weights(scenario)
  SchedulePlan plan;
  uint64_t digest;
  int vocab;
  // The scenario's run that check_property's pool probe already made (the
  // same calls on a fresh engine from the same factory): the property's own
  // first run of the scenario takes it instead of running it again.
  mutable std::optional<RunResult> probe_run;
  // No probe was made (the pool may run dry and the property's first run is
  // the scenario's): that run is the probe, and a refusal in it ends the
  // property with PoolRanDry.
  bool first_run_probes = false;
};

// Thrown by the first run of a scenario that was not probed when its pool
// ran dry: check_property then checks the calls before the refusal, with
// this run (which stopped there) as theirs.
struct PoolRanDry {
  RunResult run;
};

// The scenario on the subject: the pool probe's run where there is one,
// else a fresh run (with `meanwhile`, Meanwhile in runner.h), which throws
// PoolRanDry where it is the probe and a step was refused.
RunResult scenario_run(const Context& context, const Meanwhile& meanwhile = {});

// One sequence's logits from a solo run, or the refusal that stopped it.
struct SoloRun {
  std::vector<float> logits;  // [position][V]
  RunResult run;
  // A small pool (the scenario's or the backend's) ran dry in this run and
  // refused a step, changing nothing: data, not a failure, but its logits
  // stop there, so the comparisons that need this run are skipped.
  bool pool_ran_dry() const { return run.refused; }
};

SoloRun run_solo(const Context& context, std::span<const int32_t> tokens,
                 const std::vector<int>& chunks, int leading_dummies = 0, uint64_t dummy_seed = 0);

// The tokens the scenario feeds `sequence`, in stream order.
std::span<const int32_t> fed_tokens(const Context& context, int sequence);

}  // namespace kvcheck::checks
