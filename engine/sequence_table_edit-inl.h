// The operations that edit a running sequence's content in place or copy
// it: fork, truncate, and the context shift's erase and shift. Apart from
// the rows because each is one of docs/OPERATIONS.md's optional operations,
// with faults of its own. Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <string>

#include "engine/sequence_table.h"

namespace kvcheck {

template <bool kFaults>
SequenceId BasicSequenceTable<kFaults>::fork(SequenceId parent_id, int n, const CopySlots& copy) {
  const SequenceState& parent = lookup_count(parent_id, n, "fork");
  const int row = take_row("fork");
  const SequenceId id = next_id_++;
  SequenceState child;
  child.row = row;
  child.length = n;
  child.chunks = n > 0 ? 1 : 0;
  child.slot_base = parent.slot_base;
  child.position_base = parent.position_base;
  child.cache_key = parent.cache_key;
  if (prefix_cache_) child.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + n);
  if (!parent.positions.empty()) {
    child.positions.assign(parent.positions.begin(), parent.positions.begin() + n);
  }
  const int end = std::min(parent.slot_base + n, capacity_);
  if (paged()) {
    const int shared = std::min(blocks_for(end), static_cast<int>(parent.blocks.size()));
    for (int i = 0; i < shared; ++i) {
      const int block = parent.blocks[size_t(i)];
      child.blocks.push_back(block);
      const bool partial_last = i == shared - 1 && end % block_size_ != 0;
      if (!(partial_last && has(Fault::kForkSharesPartialBlock))) ++refcount_[size_t(block)];
    }
  } else {
    copy(storage_row(parent.row), storage_row(row), end);
  }
  row_fill_[size_t(row)] = end;
  row_position_[size_t(row)] = child.position_base + child.next_position();
  sequences_[id] = std::move(child);
  return id;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::truncate(SequenceId id, int n, const PoisonSlots& poison) {
  lookup_count(id, n, "truncate");
  if (has(Fault::kTruncateNoop)) return;
  SequenceState& s = sequences_.at(id);
  if (has(Fault::kTruncateAllNoop) && n > 0 && n == s.length) return;
  if (has(Fault::kTruncateKeepsLast) && n > 0) n -= 1;
  const int old_end = std::min(s.slot_base + s.length, capacity_);
  if (has(Fault::kTruncateLate)) s.rolled_back_end = old_end;
  s.length -= n;
  if (prefix_cache_) s.tokens.resize(size_t(s.length));
  if (!s.positions.empty()) s.positions.resize(size_t(s.length));
  if (has(Fault::kTruncateKeepsPosition)) s.position_base += n;
  const int new_end = std::min(s.slot_base + s.length, capacity_);
  row_fill_[size_t(s.row)] = new_end;
  row_position_[size_t(s.row)] = s.position_base + s.next_position();
  if (!paged()) {
    // Rolled back late: the tail keeps its data until the next step.
    if (!has(Fault::kTruncateLate)) poison(storage_row(s.row), new_end, old_end);
    return;
  }
  const size_t keep = size_t(blocks_for(new_end));
  while (s.blocks.size() > keep) {
    const int block = s.blocks.back();
    s.blocks.pop_back();
    release(block, poison);
  }
  // The kept last block: what no holder uses any more is poisoned now.
  if (!s.blocks.empty()) {
    const int block = s.blocks.back();
    // A registered block this sequence alone holds, now partly its: the next
    // step rewrites its tail. It leaves the prefix cache here rather than
    // being copied then, a copy the default pool has no block for (its
    // holder's table is already full width).
    if (prefix_cache_ && new_end % block_size_ != 0 && index_.registered(block) &&
        refcount_[size_t(block)] == 1) {
      evict(block, poison);
    }
    poison(storage_block(block), held_slots(block), block_size_);
  }
}

template <bool kFaults>
std::vector<int32_t> BasicSequenceTable<kFaults>::held_positions(SequenceId id, int p0, int p1,
                                                                 const char* call) const {
  const SequenceState& s = lookup(id, call);
  const std::string who = std::string(call) + ": sequence " + std::to_string(id);
  if (p0 < 0 || p1 < p0) {
    throw EngineError(EngineError::Kind::kBadBatch, who + ": range [" + std::to_string(p0) + ", " +
                                                        std::to_string(p1) +
                                                        ") needs 0 <= p0 <= p1");
  }
  if (paged()) {
    throw EngineError(
        EngineError::Kind::kBadBatch,
        who + ": " + call + " needs contiguous storage (block_size 0) in this engine");
  }
  std::vector<int32_t> positions(size_t(s.length));
  for (int i = 0; i < s.length; ++i) positions[size_t(i)] = s.position_of(i);
  return positions;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::erase(SequenceId id, int p0, int p1, const MoveSlots& move,
                                        const PoisonSlots& poison) {
  const std::vector<int32_t> positions = held_positions(id, p0, p1, "erase");
  SequenceState& s = sequences_.at(id);
  // Cells move down over the erased ones, in slot order, in runs.
  int kept = 0;
  std::vector<int32_t> left;
  for (int i = 0; i < s.length; ++i) {
    const int p = positions[size_t(i)];
    if (p >= p0 && p < p1) continue;
    int run = 1;
    while (i + run < s.length &&
           (positions[size_t(i + run)] < p0 || positions[size_t(i + run)] >= p1)) {
      ++run;
    }
    if (kept != i) move(storage_row(s.row), s.slot_base + i, s.slot_base + kept, run);
    for (int r = 0; r < run; ++r) left.push_back(positions[size_t(i + r)]);
    kept += run;
    i += run - 1;
  }
  if (kept == s.length) return;  // nothing held in the range: no change at all
  const int old_end = std::min(s.slot_base + s.length, capacity_);
  s.length = kept;
  s.positions = std::move(left);
  const int new_end = std::min(s.slot_base + s.length, capacity_);
  row_fill_[size_t(s.row)] = new_end;
  row_position_[size_t(s.row)] = s.position_base + s.next_position();
  poison(storage_row(s.row), new_end, old_end);
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::shift(SequenceId id, int p0, int p1, int delta,
                                        const RotateSlot& rotate) {
  const std::vector<int32_t> positions = held_positions(id, p0, p1, "shift");
  const std::string who = "shift: sequence " + std::to_string(id);
  SequenceState& s = sequences_.at(id);
  std::vector<int32_t> moved = positions;
  for (int32_t& p : moved) {
    if (p < p0 || p >= p1) continue;
    const long long to = (long long)p + delta;
    if (to < 0 || to >= max_pos_) {
      throw EngineError(EngineError::Kind::kBadBatch, who + ": position " + std::to_string(p) +
                                                          " + delta " + std::to_string(delta) +
                                                          " leaves [0, max_pos " +
                                                          std::to_string(max_pos_) + ")");
    }
    p = int32_t(to);
  }
  std::vector<int32_t> staying;  // positions of the cells outside the range
  for (const int32_t p : positions) {
    if (p < p0 || p >= p1) staying.push_back(p);
  }
  std::sort(staying.begin(), staying.end());
  for (size_t i = 0; i < moved.size(); ++i) {
    if (moved[i] != positions[i] && std::binary_search(staying.begin(), staying.end(), moved[i])) {
      throw EngineError(EngineError::Kind::kBadBatch,
                        who + ": shifting [" + std::to_string(p0) + ", " + std::to_string(p1) +
                            ") by " + std::to_string(delta) + " makes two cells hold one position");
    }
  }
  if (delta == 0 || moved == positions) return;
  for (int i = 0; i < s.length; ++i) {
    if (moved[size_t(i)] != positions[size_t(i)])
      rotate(storage_row(s.row), s.slot_base + i, delta);
  }
  s.positions = std::move(moved);
  row_position_[size_t(s.row)] = s.position_base + s.next_position();
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::div(SequenceId id, int p0, int p1, int d,
                                      const RotateSlot& rotate) {
  const std::vector<int32_t> positions = held_positions(id, p0, p1, "div");
  if (d < 1) {
    throw EngineError(EngineError::Kind::kBadBatch, "div: sequence " + std::to_string(id) + ": d " +
                                                        std::to_string(d) + " needs d >= 1");
  }
  SequenceState& s = sequences_.at(id);
  std::vector<int32_t> moved = positions;
  for (int i = 0; i < s.length; ++i) {
    int32_t& p = moved[size_t(i)];
    if (p < p0 || p >= p1 || p / d == p) continue;
    rotate(storage_row(s.row), s.slot_base + i, p / d - p);
    p /= d;
  }
  if (moved == positions) return;
  s.positions = std::move(moved);
  row_position_[size_t(s.row)] = s.position_base + s.next_position();
}

}  // namespace kvcheck
