// traits_exclude: whether an engine's declared traits let it run a scenario.
// The storage settings are checked here; each call through its operation's
// `needs` (properties/schedule/), applied to the harness's model so that an
// engine with one shared context can be held to its size.
#include <string>

#include "properties/property.h"
#include "properties/schedule/operation.h"

namespace kvcheck {

namespace {

std::string storage_excluded(const OperationTraits& op, const Scenario& scenario) {
  if (scenario.block_size > 0 && !op.paged) return "paged storage";
  if (scenario.prefix_cache && !op.prefix_cache) return "a prefix cache";
  if (scenario.prompt_logits && !op.prompt_logits) return "prompt logits on a prefix hit";
  // No engine combines a window with paged storage yet (docs/OPERATIONS.md,
  // "Sliding windows"): their combination is not applicable.
  if (scenario.config.sliding_window > 0 && scenario.block_size > 0) {
    return "paged storage with a sliding window";
  }
  return {};
}

// An engine with one context for all sequences (llama.cpp's) holds every
// running sequence's cells in it.
std::string shared_context_excluded(const ScheduleModel& model, int capacity) {
  int held = 0;
  for (const SequenceModel& s : model.sequences) held += s.running() ? s.held() : 0;
  if (held <= capacity) return {};
  return "room for " + std::to_string(held) +
         " tokens of running sequences in its one shared context of " + std::to_string(capacity);
}

}  // namespace

std::string traits_exclude(const EngineTraits& traits, const Scenario& scenario) {
  if (std::string why =
          traits.refuses(scenario.config, scenario.kv_dtype, scenario.capacity, scenario.max_rows);
      !why.empty()) {
    return why;
  }
  if (std::string why = storage_excluded(traits.operations, scenario); !why.empty()) return why;
  ScheduleModel model(scenario);
  for (const Call& call : scenario.calls) {
    const Operation& op = operation(call.kind);
    if (op.needs) {
      if (std::string why = op.needs(traits, scenario, call); !why.empty()) return why;
    }
    op.apply(model, call);
    if (traits.limits.capacity_shared) {
      if (std::string why = shared_context_excluded(model, scenario.capacity); !why.empty()) {
        return why;
      }
    }
  }
  return "";
}

}  // namespace kvcheck
