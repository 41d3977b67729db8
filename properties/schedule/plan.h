// What a valid schedule implies for the oracle (SchedulePlan), and the
// builder each operation's `plan` (operation.h) writes it through. Apart from
// the runner because it needs no engine: plan_schedule is one loop over the
// calls, and what a call means for the oracle lives in its operation's file.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "oracle/oracle.h"
#include "properties/scenario.h"

namespace kvcheck {

// What one sequence held between two truncations (or its start and its end):
// the oracle of `tokens` is the reference of every token fed in the span
// (docs/OPERATIONS.md).
struct Segment {
  int begin_call = -1;                   // the call that opened it (start, fork, truncate)
  std::vector<int32_t> tokens;           // [position] content when it closed
  std::vector<std::pair<int, int>> fed;  // [token fed in it] (stream index, position)
  // A sequence whose lineage holds an erase or shift: its reference is
  // oracle::replay of this history (the state after begin_call), and `fed`
  // pairs each stream index with its feed index in the history.
  std::vector<oracle::Event> history;
};

// What a valid scenario's schedule implies, computed without an engine. One
// walk over the calls (plan_schedule) fills it; properties, the shrinker and
// the generators' coverage read it instead of walking again.
struct SchedulePlan {
  std::vector<int> fed;                            // [sequence] stream tokens fed by the last call
  std::vector<std::vector<int>> chunks;            // [sequence][chunk] lengths, in feed order
  std::vector<std::vector<int>> call_of_position;  // [sequence][stream index] call that fed it
  std::vector<int> start_call;                     // [sequence] call that started it, or -1
  std::vector<int> end_call;  // [sequence] call that finished or reset it, or -1 (still running)
  std::vector<bool> shared_step;  // [sequence] fed in a step together with another sequence
  // The operations: a plain sequence is never forked into and never
  // truncated, so its content is its stream (P2..P5, P9 solo runs need it).
  std::vector<bool> plain;       // [sequence]
  std::vector<int> forked_from;  // [sequence] parent, or -1
  std::vector<bool> forked;      // [sequence] some fork took from it
  std::vector<bool> truncated;   // [sequence] lost tokens to a truncation
  std::vector<bool> shifted;  // [sequence] its lineage holds an erase or shift (Segment::history)
  std::vector<std::vector<oracle::Event>> history;  // [sequence] every feed and operation so far
  std::vector<std::vector<int32_t>> cells;          // [sequence][cell] position it holds, last
  std::vector<std::vector<Segment>> segments;       // [sequence][segment] in call order
  std::vector<std::vector<int32_t>> content;        // [sequence][position] what it held last
  std::vector<std::vector<int>> content_stream;  // [sequence][position] stream index, -1 inherited
  std::vector<std::vector<int>> content_chunks;  // [sequence][chunk] how its content was fed
  int max_content = 0;                           // the longest content at any time

  // The segment of `sequence` in force after call `call` (-1 before it starts).
  int segment_at(int sequence, int call) const;
};

// What a save keeps of one sequence's plan, which its restore brings back
// (docs/OPERATIONS.md, "Save and restore").
struct SavedPlan {
  std::vector<int32_t> content;        // [position]
  std::vector<int> content_stream;     // [position] stream index, -1 inherited
  std::vector<int32_t> cells;          // [cell] position it holds
  std::vector<oracle::Event> history;  // every feed and operation up to the save
  std::vector<int> content_chunks;     // [chunk] how its content was fed
};

// The plan being built, call by call: each operation's `plan` changes it as
// its call does (operation.h). The segment helpers keep the one rule every
// operation shares: a segment's reference is its content (plain) or, once
// the lineage holds an erase or shift, the replay of its history.
struct PlanBuilder {
  explicit PlanBuilder(const Scenario& scenario);

  const Scenario& scenario;
  SchedulePlan plan;
  std::vector<bool> running;                    // [sequence]
  std::vector<std::optional<SavedPlan>> saved;  // [sequence] its last save, if any

  // A segment of `s` opened by call `call`, its reference the content.
  void open(size_t s, int call);
  // A segment whose reference is the replay of the history so far (a
  // shifted sequence gets one after every call that changes it; close a
  // plain one first).
  void open_history(size_t s, int call);
  // open_history when `s` is shifted, else open.
  void reopen(size_t s, int call);
  // The open segment of `s` ends: it records the content it held.
  void close(size_t s);
  // An erase or shift of `s`: from here on its content no longer defines
  // its cache and its reference replays the history (docs/OPERATIONS.md).
  // Closes the open segment with what it held before the call; the caller
  // opens the next with open_history once the call is in the history.
  void mark_shifted(size_t s);
  // Feed events in the history of `s` so far.
  int feeds(size_t s) const;
  // The plan, once every call was applied: the segments still open close.
  SchedulePlan finish();
};

// The scenario must validate.
SchedulePlan plan_schedule(const Scenario& scenario);

}  // namespace kvcheck
