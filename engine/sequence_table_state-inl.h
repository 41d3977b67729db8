// Sequence state save and restore (llama.cpp's llama_state_seq_get_data /
// set_data into the same sequence): the saved copy is the sequence's
// bookkeeping and its slots' bytes, kept outside the storage, so a save
// shares nothing with the live rows that later writes could change, and a
// restore clears what the sequence held before writing the copy back
// (docs/OPERATIONS.md, "Save and restore"). Apart from the rows because it
// is an optional operation with a fault of its own (restore_keeps_tail).
// Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/sequence_table.h"

namespace kvcheck {

template <bool kFaults>
void BasicSequenceTable<kFaults>::save(SequenceId id, const ReadSlots& read) {
  const SequenceState& s = lookup(id, "save");
  if (paged()) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      "save: sequence " + std::to_string(id) +
                          ": needs contiguous storage (block_size 0) in this engine");
  }
  const int end = std::min(s.slot_base + s.length, capacity_);
  saved_[id] = SavedState{s, read(storage_row(s.row), s.slot_base, end)};
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::restore(SequenceId id, const WriteSlots& write,
                                          const PoisonSlots& poison) {
  lookup(id, "restore");
  const auto saved = saved_.find(id);
  if (saved == saved_.end()) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      "restore: sequence " + std::to_string(id) + " was never saved");
  }
  SequenceState& s = sequences_.at(id);
  SequenceState back = saved->second.state;
  back.row = s.row;  // a finish may have moved the sequence down a row since
  back.slot_base = s.slot_base;
  back.rolled_back_end = 0;
  const int old_end = std::min(s.slot_base + s.length, capacity_);
  // Fault (llama.cpp #4005): the saved cells are written over the first
  // ones, but the cells held past them stay, with their positions.
  if (has(Fault::kRestoreKeepsTail) && s.length > back.length) {
    if (!back.positions.empty() || !s.positions.empty()) {
      std::vector<int32_t> positions;  // [cell]
      for (int i = 0; i < back.length; ++i) positions.push_back(back.position_of(i));
      for (int i = back.length; i < s.length; ++i) positions.push_back(s.position_of(i));
      back.positions = std::move(positions);
    }
    back.length = s.length;
  }
  write(storage_row(s.row), s.slot_base, saved->second.bytes);
  const int new_end = std::min(back.slot_base + back.length, capacity_);
  s = std::move(back);
  row_fill_[size_t(s.row)] = new_end;
  row_position_[size_t(s.row)] = s.position_base + s.next_position();
  poison(storage_row(s.row), new_end, old_end);
}

}  // namespace kvcheck
