// traits_exclude: whether an engine's declared traits let it run a scenario.
// It has a file of its own because it walks the schedule (one of the
// switches over Call::Kind that issue 28 folds into one schedule model) and
// is rewritten apart from the properties; the properties only call it.
#include <algorithm>
#include <string>
#include <vector>

#include "properties/property.h"

namespace kvcheck {

std::string traits_exclude(const EngineTraits& traits, const Scenario& scenario) {
  if (std::string why =
          traits.refuses(scenario.config, scenario.kv_dtype, scenario.capacity, scenario.max_rows);
      !why.empty()) {
    return why;
  }
  const OperationTraits& op = traits.operations;
  if (scenario.block_size > 0 && !op.paged) return "paged storage";
  if (scenario.prefix_cache && !op.prefix_cache) return "a prefix cache";
  // No engine combines a window with the storage operations yet
  // (docs/OPERATIONS.md, "Sliding windows"): their combination is not applicable.
  const bool window = scenario.config.sliding_window > 0;
  if (window && scenario.block_size > 0) return "paged storage with a sliding window";
  std::vector<int> fed(scenario.sequences.size(), 0);  // [sequence]
  std::vector<bool> running(scenario.sequences.size(), false);
  for (const Call& call : scenario.calls) {
    switch (call.kind) {
      case Call::Kind::kStart:
        running[size_t(call.sequence)] = true;
        break;
      case Call::Kind::kFinish:
        if (!op.finish) return "finish";
        running[size_t(call.sequence)] = false;
        break;
      case Call::Kind::kReset:
        if (!op.reset) return "reset";
        std::fill(running.begin(), running.end(), false);
        break;
      case Call::Kind::kFork:
        if (!op.fork) return "fork";
        if (window) return "fork with a sliding window";
        running[size_t(call.sequence)] = true;
        fed[size_t(call.sequence)] = call.count;
        break;
      case Call::Kind::kTruncate:
        if (!op.truncate) return "truncate";
        if (window) return "truncate with a sliding window";
        fed[size_t(call.sequence)] -= call.count;
        break;
      case Call::Kind::kFlush:
        if (!op.prefix_cache) return "a prefix cache";
        break;
      case Call::Kind::kErase:
        if (!op.erase) return "erase";
        break;
      case Call::Kind::kShift:
        if (!op.shift) return "shift";
        break;
      case Call::Kind::kStep: {
        if (call.chunks.size() > 1 && !op.multi_sequence_step) {
          return "several sequences in one step";
        }
        int tokens = 0;
        for (const ChunkSpec& c : call.chunks) {
          tokens += c.length;
          fed[size_t(c.sequence)] += c.length;
        }
        if (tokens > traits.limits.max_step_tokens) {
          return "steps of " + std::to_string(tokens) + " tokens (at most " +
                 std::to_string(traits.limits.max_step_tokens) + ")";
        }
        break;
      }
    }
    if (traits.limits.capacity_shared) {
      int held = 0;
      for (size_t s = 0; s < fed.size(); ++s) held += running[s] ? fed[s] : 0;
      if (held > scenario.capacity) {
        return "room for " + std::to_string(held) +
               " tokens of running sequences in its one "
               "shared context of " +
               std::to_string(scenario.capacity);
      }
    }
  }
  return "";
}

}  // namespace kvcheck
