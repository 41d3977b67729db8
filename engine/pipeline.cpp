// The state a refused step must leave as it was, read through the engine's
// own calls: what the runner compares for an engine without a pipeline
// (engine/pipeline.h).
#include "engine/pipeline.h"

namespace kvcheck {

EngineState read_state(const Engine& engine, std::span<const SequenceId> sequences) {
  EngineState out;
  try {
    out.pool = engine.pool();
  } catch (const EngineError&) {
  }
  for (const SequenceId id : sequences) out.lengths.push_back(engine.length(id));
  return out;
}

}  // namespace kvcheck
