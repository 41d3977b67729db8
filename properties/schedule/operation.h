// One schedule operation, declared once: its case-file keyword, how a call
// of it is written, its precondition and its effect on the harness's model
// (ScheduleModel), its meaning for the oracle (SchedulePlan), how it runs on
// an engine, the engine trait it needs, and how the generators draw it over
// its whole domain and the shrinker simplifies it. The walkers
// (Scenario::validate, traits_exclude, plan_schedule, the runner, the
// generators, the shrinker) read this table instead of switching over
// Call::Kind; an operation of its own is one file in properties/schedule/
// plus its row in operations.cpp (docs/OPERATIONS.md, "Adding an operation").
// Modelled on RapidCheck's state::Command (checkPreconditions, apply, run).
#pragma once

#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/traits.h"
#include "properties/scenario.h"
#include "properties/schedule/schedule_model.h"

namespace kvcheck {

struct PlanBuilder;  // properties/schedule/plan.h
class CallTarget;    // properties/schedule/call_target.h

// The generic genes a generated operation is drawn from: independent,
// shrinkable integers, each shrinking toward 0 (the simplest choice). Each
// operation reads them its own way (its `draw`), so one gene record serves
// them all and the shrinker of genes needs to know none of them.
struct OperationGenes {
  int target = 0;   // which running sequence: an index among them
  int a = 0;        // first parameter (a count, a start position, ...)
  int b = 0;        // second parameter (a width, an end, ...)
  int c = 0;        // third parameter (a delta, ...)
  int variant = 0;  // which form of the operation (snap to a block, ...)

  bool operator==(const OperationGenes&) const = default;
};

// What the generators know when they draw an operation.
struct DrawContext {
  const ScheduleModel& model;
  int sequence = 0;    // the running sequence `genes.target` chose
  int block_size = 4;  // the storage's block (4 when contiguous, so snapping means something)
  int max_pos = 0;     // positions a shift may reach: [0, max_pos)
};

// One argument of a call as a case file writes it after the keyword.
struct Argument {
  std::string_view label;  // names it in a parse error ("fork child")
  int Call::*field;
  bool sequence = false;  // written s<index>, else a decimal integer
  int lo = 0;             // the integers accepted: shift's delta may be negative
  int hi = std::numeric_limits<int>::max();
};

// What the shrinker's normalization knows of each sequence while it walks a
// candidate, which may not validate: content lengths by then, and each one's
// at its last save.
struct ContentLengths {
  std::vector<int> held;   // [sequence] content length by then
  std::vector<int> saved;  // [sequence] content length at its last save
  bool valid(int q) const { return q >= 0 && size_t(q) < held.size(); }
};

struct Operation {
  Call::Kind kind = Call::Kind::kStep;
  std::string_view keyword = {};  // the case file's and the trace's name
  // The arguments after the keyword, in order; a step writes its chunks
  // instead (`arguments` below, and the case file's own reader).
  std::span<const Argument> syntax = {};
  int weight = 0;  // relative chance the generators draw it (0: never drawn)
  // The call's arguments as a case file writes them after the keyword.
  // Null: `syntax`'s, space-separated.
  std::string (*arguments)(const Call& call) = nullptr;
  // "" when `call` may run in `model`'s state, else what is wrong with it.
  std::string (*precondition)(const ScheduleModel& model, const Call& call) = nullptr;
  // Its effect on the model (the precondition holds).
  void (*apply)(ScheduleModel& model, const Call& call) = nullptr;
  // Its meaning for the oracle: how call `call_index` of a valid scenario
  // changes the plan (segments, histories, content, chunks, flags).
  void (*plan)(PlanBuilder& builder, const Call& call, int call_index) = nullptr;
  // How it runs: the engine's call, and its effect on the runner's record
  // of the sequences. EngineErrors propagate to the runner.
  void (*run)(CallTarget& target, const Call& call, int call_index) = nullptr;
  // "" when an engine with `traits` runs `call` in `scenario`, else what
  // it lacks (the "not applicable" reason). Null: every engine runs it.
  std::string (*needs)(const EngineTraits& traits, const Scenario& scenario,
                       const Call& call) = nullptr;
  // "" when the operation can appear in `scenario` at all (its family,
  // storage and window allow it), else why not. Null: anywhere.
  std::string (*scope)(const Scenario& scenario) = nullptr;
  // A call drawn from `genes` for `context.sequence`, anywhere in its
  // domain; nullopt when there is nothing to draw (the generators skip it).
  // Only operations on one running sequence are drawn this way.
  std::optional<Call> (*draw)(const DrawContext& context, const OperationGenes& genes) = nullptr;
  // Simpler forms of `call`, simplest first, for the shrinker (which keeps
  // those that still validate): smaller counts, narrower ranges, smaller
  // deltas. Null: the call has nothing to simplify but its removal.
  std::vector<Call> (*simpler)(const Call& call) = nullptr;
  // The shrinker's normalization: clamps the call's counts to what its
  // sequences hold by then (so a shorter step keeps it valid), updates
  // `lengths`, and says whether the call still does anything. Null: it
  // changes no content length and stays.
  bool (*normalize)(Call& call, ContentLengths& lengths) = nullptr;
  // It starts the sequence it names (a start; a fork's child).
  bool starts = false;
  // It can free storage (a row, a block, a tail of slots), which must be
  // poisoned again (P14 applies to scenarios that hold one).
  bool releases = false;
};

// Distinct values below `current` and at least `lo`, smallest first: lo,
// half, one less and any of `extra`. The shrinker's steps toward simpler.
std::vector<int> smaller_values(int current, int lo, std::initializer_list<int> extra = {});

// The arguments of `call` as its operation's syntax writes them.
std::string written_arguments(const Call& call);

// Every operation, in Call::Kind order.
std::span<const Operation> operations();
const Operation& operation(Call::Kind kind);
// Null when no operation has that keyword.
const Operation* find_operation(std::string_view keyword);

}  // namespace kvcheck
