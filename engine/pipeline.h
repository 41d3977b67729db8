// The one optional seam of Engine for transports (Engine::pipeline). An
// engine in another process pays a round trip per call that waits; through
// this interface the runner sends steps without waiting and collects their
// replies later, in order. In-process engines return no pipeline and answer
// each step as it comes. The exec: backend implements it (backends/exec/);
// docs/DECISIONS.md, "One seam for transports", says why it is one seam.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvcheck {

// What a step refused for capacity must leave as it was (docs/OPERATIONS.md,
// "Small pools"): the pool report, nullopt where pool() throws EngineError,
// and the length of each watched sequence.
struct EngineState {
  std::optional<PoolReport> pool;
  std::vector<int> lengths;  // [watched sequence]
};

// The state as the engine's calls answer it: pool() and length() of each of
// `sequences` (an engine that throws EngineError from pool() has no pool).
EngineState read_state(const Engine& engine, std::span<const SequenceId> sequences);

// The watched sequences' state before and after a watched step, read on the
// step's own round trip.
struct StepStates {
  EngineState before;
  std::optional<EngineState> after;  // nullopt where it could not be read
  std::string unreadable;            // why `after` is missing
};

class Pipeline {
 public:
  virtual ~Pipeline() = default;

  // Sends a step without waiting. Calls made before it is collected behave
  // as if it had completed, in order.
  virtual void post_step(std::span<const BatchEntry> batch) = 0;
  // The same, where the step may be refused for want of pool blocks: the
  // state of `watch` before and after it travels with it.
  virtual void post_watched_step(std::span<const BatchEntry> batch,
                                 std::span<const SequenceId> watch) = 0;
  // The logits of the oldest step posted and not yet collected; throws what
  // step() would have thrown for it. Every reply the step owes is read
  // before anything is thrown. For a watched step, `states` is set once its
  // own reply is read, before its refusal is thrown (an error reading the
  // state before it is thrown with `states` left unset).
  virtual void collect_step(std::vector<float>& logits, std::optional<StepStates>& states) = 0;

  // Sends what is posted now, replies unread, so that the engine works on it
  // while the caller does something else (kvcheck computes the oracle).
  virtual void send_posted() = 0;
  // Reads the answers to every call sent without waiting and throws the
  // first refusal among them not yet raised: the end of a run, where no
  // later call would raise it.
  virtual void settle_sent() = 0;
};

}  // namespace kvcheck
