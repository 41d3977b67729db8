// The scenario runs every property shares (context.h says why they live
// apart from the properties).
#include "properties/common/context.h"

#include <utility>

namespace kvcheck::checks {

RunResult scenario_run(const Context& context, const Meanwhile& meanwhile) {
  if (context.probe_run) {
    RunResult run = std::move(*context.probe_run);
    context.probe_run.reset();
    if (meanwhile && !run.engine_failed) meanwhile();
    return run;
  }
  RunResult run = run_scenario(context.scenario, context.weights, context.factory, {}, meanwhile);
  if (context.first_run_probes && run.refused) throw PoolRanDry{std::move(run)};
  return run;
}

SoloRun run_solo(const Context& context, std::span<const int32_t> tokens,
                 const std::vector<int>& chunks, int leading_dummies, uint64_t dummy_seed) {
  const Scenario solo =
      solo_scenario(context.scenario, tokens, chunks, leading_dummies, dummy_seed);
  SoloRun result;
  result.run = run_scenario(solo, context.weights, context.factory);
  result.logits = std::move(result.run.logits[0]);
  return result;
}

std::span<const int32_t> fed_tokens(const Context& context, int sequence) {
  return std::span<const int32_t>(context.scenario.sequences[size_t(sequence)])
      .first(size_t(context.plan.fed[size_t(sequence)]));
}

}  // namespace kvcheck::checks
