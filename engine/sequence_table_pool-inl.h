// The paged pool's bookkeeping: reference counts, the free list, the prefix
// index's registrations and evictions, what finish, abort and reset do to
// blocks, and the reads of it (pool report, held slots, storage map).
// Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <string>

#include "engine/sequence_table.h"

namespace kvcheck {

template <bool kFaults>
void BasicSequenceTable<kFaults>::register_blocks(const SequenceState& s) {
  // Only a prompt's own content is registered: a sequence whose slots are
  // offset (a faulty reset) registers nothing.
  if (s.slot_base != 0) return;
  const size_t full = std::min(size_t(s.length / block_size_), s.blocks.size());
  int parent = -1;
  for (size_t j = 0; j < full; ++j) {
    const int block = s.blocks[j];
    if (!index_.registered(block)) {
      const std::span<const int32_t> own(s.tokens.data() + j * size_t(block_size_),
                                         size_t(block_size_));
      // An equal chain registered already: this copy stays private, and so
      // does everything after it.
      if (!index_.add(block, parent, own, index_key(s))) return;
    }
    parent = block;
  }
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::cached_blocks(int first, int end) const {
  int n = 0;
  for (int b = first; b < end; ++b) n += prefix_cache_ && cached(b);
  return n;
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::allocate_block(const PoisonSlots& poison) {
  if (free_.empty()) {
    // The free list ran dry: the least recently used cached block goes.
    int victim = -1;
    for (int b = 0; b < pool_blocks_; ++b) {
      if (!cached(b)) continue;
      if (victim < 0 || index_.last_use(b) < index_.last_use(victim)) victim = b;
    }
    // Nothing to evict: a step checks its blocks before it takes any, so only
    // a faulty engine (a leaked or double-freed block) gets here. Its wrong
    // accounting is a refusal the properties see, never a write out of bounds.
    if (victim < 0) {
      throw EngineError(EngineError::Kind::kCapacity,
                        "the pool ran dry: no free and no cached block of " +
                            std::to_string(pool_blocks_) + " left to allocate");
    }
    evict(victim, poison);
  }
  const int block = free_.back();
  free_.pop_back();
  // Only a faulty finish frees a registered block; it is forgotten here.
  if (prefix_cache_ && index_.registered(block)) {
    std::vector<int> dropped;
    index_.remove(block, dropped);
  }
  refcount_[size_t(block)] = 1;
  return block;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::evict(int block, const PoisonSlots& poison) {
  std::vector<int> dropped{block};
  index_.remove(block, dropped);
  // Blocks chained after it can no longer be reached; the cached ones
  // are freed with it (a held one stays with its holder, unregistered).
  for (const int b : dropped) {
    if (refcount_[size_t(b)] != 0) {
      // No longer the cache's: the slots past its holders' lengths (a
      // truncated holder) are nobody's now.
      poison(storage_block(b), held_slots(b), block_size_);
      continue;
    }
    free_.push_back(b);
    poison(storage_block(b), 0, block_size_);
  }
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::release(int block, const PoisonSlots& poison) {
  int& count = refcount_[size_t(block)];
  if (count <= 0) return;  // already free (only a faulty engine gets here)
  if (--count == 0) {
    // The fault: an aborted request's registered blocks go back to the free
    // list, poisoned, while the index still maps their tokens to them.
    const bool freed_in_index = aborting_ && has(Fault::kAbortFreesCached);
    if (prefix_cache_ && index_.registered(block) && !freed_in_index) {
      index_.touch(block);  // cached: kept, data and all, until evicted or flushed
      return;
    }
    give_back(block);
    poison(storage_block(block), 0, block_size_);
  } else {
    poison(storage_block(block), held_slots(block), block_size_);
  }
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::drop_blocks(SequenceState& s, const PoisonSlots& poison,
                                              bool finishing) {
  const std::vector<int> blocks = std::move(s.blocks);
  s.blocks.clear();
  for (const int block : blocks) {
    int& count = refcount_[size_t(block)];
    if (finishing && has(Fault::kRefcountLeak) && count > 1) continue;
    if (finishing && has(Fault::kFreedBlockStillReferenced) && count > 1) {
      count = 0;
      give_back(block);
      poison(storage_block(block), 0, block_size_);
      continue;
    }
    release(block, poison);
  }
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::flush_prefix_cache(const PoisonSlots& poison) {
  if (!prefix_cache_) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      "flush_prefix_cache: the engine has no prefix cache "
                      "(EngineOptions::prefix_cache is false)");
  }
  std::vector<int> registered;
  for (int b = 0; b < pool_blocks_; ++b) {
    if (index_.registered(b)) registered.push_back(b);
  }
  std::vector<int> dropped;
  for (const int b : registered) index_.remove(b, dropped);
  for (const int b : registered) {
    if (refcount_[size_t(b)] == 0) {
      free_.push_back(b);  // was cached
      poison(storage_block(b), 0, block_size_);
    } else {
      // Held, no longer registered: what its holders do not hold (a
      // truncated holder's tail) is nobody's now.
      poison(storage_block(b), held_slots(b), block_size_);
    }
  }
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::finish_paged(SequenceId id, const PoisonSlots& poison) {
  SequenceState s = lookup(id, "finish");
  sequences_.erase(id);
  drop_blocks(s, poison, true);
  row_owner_[size_t(s.row)] = kNoSequence;
  row_fill_[size_t(s.row)] = 0;
  row_position_[size_t(s.row)] = 0;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::abort_paged(SequenceId id, const PoisonSlots& poison) {
  aborting_ = true;
  try {
    finish_paged(id, poison);
  } catch (...) {
    aborting_ = false;
    throw;
  }
  aborting_ = false;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::reset_paged(const PoisonSlots& poison) {
  std::map<SequenceId, SequenceState> dropped;
  dropped.swap(sequences_);
  for (auto& [id, s] : dropped) drop_blocks(s, poison, false);
  std::fill(row_owner_.begin(), row_owner_.end(), kNoSequence);
  for (int r = 0; r < max_rows_; ++r) {
    if (!has(Fault::kResetKeepsKv)) row_fill_[size_t(r)] = 0;
    if (!has(Fault::kResetKeepsPosition)) row_position_[size_t(r)] = 0;
  }
}

template <bool kFaults>
const std::vector<int>& BasicSequenceTable<kFaults>::blocks_of_row(int row) const {
  static const std::vector<int> kNone;
  const SequenceId owner = row_owner_[size_t(row)];
  if (owner == kNoSequence) return kNone;
  const auto it = sequences_.find(owner);
  return it == sequences_.end() ? kNone : it->second.blocks;
}

template <bool kFaults>
std::pair<int, int> BasicSequenceTable<kFaults>::locate(int row, int slot, int missing) const {
  const std::vector<int>& blocks = blocks_of_row(row);
  const size_t index = size_t(slot / block_size_);
  if (index >= blocks.size()) return {missing, slot % block_size_};
  return {storage_block(blocks[index]), slot % block_size_};
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::held_slots(int unit) const {
  // A registered block's contents are the cache's: all of it is held.
  if (paged() && prefix_cache_ && index_.registered(unit)) return block_size_;
  int held = 0;
  for (const auto& [id, s] : sequences_) {
    const int end = std::min(s.slot_base + s.length, capacity_);
    if (!paged()) {
      if (s.row == unit) held = std::max(held, end);
      continue;
    }
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      if (s.blocks[i] != unit) continue;
      held = std::max(held, std::clamp(end - int(i) * block_size_, 0, block_size_));
    }
  }
  return held;
}

template <bool kFaults>
std::string BasicSequenceTable<kFaults>::unheld_storage_check(const IsPoisoned& poisoned) const {
  for (int unit = 0; unit < units(); ++unit) {
    const int storage = paged() ? storage_block(unit) : unit;
    for (int slot = held_slots(unit); slot < unit_slots(); ++slot) {
      for (int l = 0; l < n_layers_; ++l) {
        for (int g = 0; g < n_kv_heads_; ++g) {
          for (int d = 0; d < head_dim_; ++d) {
            for (const bool key : {true, false}) {
              if (poisoned(key, l, storage, g, slot, d)) continue;
              return std::string(paged() ? "block " : "row ") + std::to_string(unit) + " slot " +
                     std::to_string(slot) + " layer " + std::to_string(l) + " kv head " +
                     std::to_string(g) + " dim " + std::to_string(d) + " " + (key ? "K" : "V") +
                     ": held by no sequence, yet not poisoned";
            }
          }
        }
      }
    }
  }
  return "";
}

template <bool kFaults>
PoolReport BasicSequenceTable<kFaults>::pool_report() const {
  PoolReport r;
  if (!paged()) return r;
  r.block_size = block_size_;
  r.total = pool_blocks_;
  r.refcounts = refcount_;
  r.free = static_cast<int>(free_.size());
  r.cached = cached_blocks(0, pool_blocks_);
  r.host_total = host_blocks_;
  r.host_free = static_cast<int>(host_free_.size());
  r.host_cached = cached_blocks(pool_blocks_, storage_units());
  // A table's block counts in the tier that holds it.
  for (int b = 0; b < storage_units(); ++b) {
    if (refcount_[size_t(b)] > 0) ++(on_host(b) ? r.host_used : r.used);
  }
  for (const auto& [id, s] : sequences_) r.tables.push_back({id, s.blocks});
  return r;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::storage_holding(int units,
                                                  std::vector<std::vector<SequenceId>>& holders,
                                                  std::vector<int>& held) const {
  holders.assign(size_t(units), {});
  held.assign(size_t(units), 0);
  const auto hold = [&](int unit, SequenceId id, int slots) {
    if (unit < 0 || unit >= units) return;
    std::vector<SequenceId>& h = holders[size_t(unit)];
    if (h.empty() || h.back() != id) h.push_back(id);
    held[size_t(unit)] = std::max(held[size_t(unit)], slots);
  };
  for (const auto& [id, s] : sequences_) {
    const int end = std::min(s.slot_base + s.length, capacity_);
    if (!paged()) {
      hold(storage_row(s.row), id, end);
      continue;
    }
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      hold(storage_block(s.blocks[i]), id, std::clamp(end - int(i) * block_size_, 0, block_size_));
    }
  }
}

}  // namespace kvcheck
