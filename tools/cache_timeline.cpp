#include "tools/cache_timeline.h"

#include <optional>

#include "model/weights.h"
#include "properties/runner.h"
#include "tools/trace.h"

namespace kvcheck::cli {

namespace {

// A frame of the runner's engine now, with the slots that differ from `before`.
std::optional<TimelineFrame> frame_of(const ScenarioRunner& runner, size_t n_sequences,
                                      const TimelineFrame* before, std::string label) {
  std::optional<StorageMap> map = runner.engine().storage_map();
  if (!map) return std::nullopt;
  TimelineFrame frame;
  frame.label = std::move(label);
  frame.holders.assign(size_t(map->units), {});
  for (size_t s = 0; s < n_sequences; ++s) {
    const int sequence = int(s);
    if (!runner.running(sequence)) continue;
    for (int u = 0; u < map->units; ++u) {
      for (SequenceId id : map->holders[size_t(u)]) {
        if (id == runner.id(sequence)) frame.holders[size_t(u)].push_back(sequence);
      }
    }
  }
  frame.wrote.assign(map->digest.size(), 0);
  if (before != nullptr && before->map.digest.size() == map->digest.size()) {
    for (size_t c = 0; c < map->digest.size(); ++c) {
      frame.wrote[c] = map->digest[c] != before->map.digest[c];
    }
  }
  frame.map = std::move(*map);
  return frame;
}

}  // namespace

CacheTimeline cache_timeline(const Scenario& s, const EngineUnderTest& subject) {
  CacheTimeline timeline;
  if (!subject.traits.operations.storage_map) {
    timeline.unavailable = "the engine (" + subject.traits.identity.name +
                           ") does not declare operations.storage_map, so its storage cannot be "
                           "drawn";
    return timeline;
  }
  const std::shared_ptr<const Weights> weights = scenario_weights(s);
  try {
    ScenarioRunner runner(s, s.config, *weights, subject.factory);
    const size_t n = s.sequences.size();
    std::optional<TimelineFrame> first = frame_of(runner, n, nullptr, "fresh engine");
    if (!first) {
      timeline.unavailable = "the engine declares a storage map but returned none";
      return timeline;
    }
    timeline.frames.push_back(std::move(*first));
    const CallHook hook = [&](int call, const ScenarioRunner& r) {
      if (int(timeline.frames.size()) >= kMaxTimelineFrames) {
        timeline.truncated = true;
        return false;
      }
      std::optional<TimelineFrame> frame =
          frame_of(r, n, &timeline.frames.back(),
                   "after call " + std::to_string(call) + ": " + s.calls[size_t(call)].to_text());
      if (frame) timeline.frames.push_back(std::move(*frame));
      return true;
    };
    const RunResult run = runner.run(hook);
    if (run.engine_failed || run.threw) {
      std::optional<TimelineFrame> frame =
          frame_of(runner, n, &timeline.frames.back(),
                   "call " + std::to_string(run.failed_call) + " refused: " + run.error_message);
      if (frame) timeline.frames.push_back(std::move(*frame));
    }
  } catch (const std::exception& e) {
    timeline.unavailable =
        std::string("the engine threw while the timeline was recorded: ") + e.what();
    timeline.frames.clear();
  }
  return timeline;
}

}  // namespace kvcheck::cli
