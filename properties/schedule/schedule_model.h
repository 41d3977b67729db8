// The harness's own model of what a schedule does to the sequences: which
// run, how far each has been fed, and the position each of its cells holds.
// Every walker (validation, trait exclusion, the generators, the shrinker)
// applies calls to this one model through the operation table
// (properties/schedule/operation.h), so a call means the same thing to all
// of them. It shares no code with the engine's SequenceTable on purpose: the
// harness must never borrow the bookkeeping of the engine it checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "properties/scenario.h"

namespace kvcheck {

struct SequenceModel {
  enum class State : uint8_t { kNotStarted, kRunning, kDropped };
  State state = State::kNotStarted;
  int fed = 0;                 // tokens of its feed stream fed so far
  std::vector<int32_t> cells;  // [cell] the position it holds, in slot order
  int draft = 0;               // tokens its last step fed: what a verify may roll back
  // Its cells at its last save (docs/OPERATIONS.md, "Save and restore"),
  // which a restore brings back; none before its first save.
  std::optional<std::vector<int32_t>> saved;

  bool running() const { return state == State::kRunning; }
  int held() const { return static_cast<int>(cells.size()); }
  int next_position() const { return kvcheck::next_position(cells); }
  // True when some cell's index differs from the position it holds: the
  // state only erase and shift create, and where index/position bugs hide.
  bool gapped() const;
};

struct ScheduleModel {
  explicit ScheduleModel(const Scenario& scenario);

  const Scenario& scenario;
  std::vector<SequenceModel> sequences;  // [sequence]
  int running = 0;                       // sequences running now

  bool exists(int s) const { return s >= 0 && s < static_cast<int>(sequences.size()); }
  bool is_running(int s) const { return exists(s) && sequences[size_t(s)].running(); }
  SequenceModel& at(int s) { return sequences[size_t(s)]; }
  const SequenceModel& at(int s) const { return sequences[size_t(s)]; }
};

// "" when erase and shift apply to `scenario`, else why not (after "erase: "):
// RoPE models with contiguous storage and no window only
// (docs/OPERATIONS.md, "Erase and shift", says why).
std::string cell_operation_scope(const Scenario& scenario);

// "" when a call on a range of positions (erase, shift, div) may run:
// its sequence is running, the scenario is in cell_operation_scope and
// 0 <= p0 <= p1; else why not, naming `keyword`.
std::string cell_range_precondition(const ScheduleModel& model, const Call& call,
                                    const std::string& keyword);

// The positions a sequence's cells hold, ascending.
std::vector<int32_t> sorted_positions(const SequenceModel& sequence);

}  // namespace kvcheck
