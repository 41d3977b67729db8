// What an operation's `run` (operation.h) runs a call on: the engine under
// test and the runner's own record of each sequence (the engine's id for it,
// and what the runner tracks of it). ScenarioRunner implements it; an
// operation's file says which Engine call it makes and how the record
// changes, so the runner needs no switch over Call::Kind. The record is the
// runner's, never the engine's SequenceTable.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "properties/scenario.h"

namespace kvcheck {

// The runner's record of one scenario sequence.
struct RunnerSequence {
  SequenceId id = -1;                               // the engine's id for it
  bool running = false;                             // started or forked into, not finished or reset
  int fed = 0;                                      // stream tokens fed
  int held = 0;                                     // content length
  std::vector<int32_t> cells;                       // [cell] the position it holds (erase needs it)
  std::optional<std::vector<int32_t>> saved_cells;  // [cell] at its last save (restore)
};

class CallTarget {
 public:
  // The engine under test, and the scenario it runs.
  virtual Engine& engine() = 0;
  virtual const Scenario& scenario() const = 0;
  // [sequence] the runner's record, by scenario index.
  virtual std::span<RunnerSequence> sequences() = 0;
  // The positions a cell may hold: [0, max_pos).
  virtual int max_pos() const = 0;
  // Runs a step: batches its chunks, steps the engine (or posts the step
  // through its pipeline), files the logits and advances fed, held and cells.
  virtual void feed(const Call& call, int call_index) = 0;

 protected:
  ~CallTarget() = default;
};

}  // namespace kvcheck
