#include "engine/sequence_table.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

namespace kvcheck {

// The fault prefix_hash_only keys the prefix index on this many bits of the
// chained hash and compares nothing else. Few enough that the generators'
// scenarios (a handful of registered blocks each) collide: at 8 bits a
// lookup collides with probability ~R/256 and the kill matrix's 100 cases
// did not meet one; at 4 bits it is ~R/16 (docs/FAULTS.md).
constexpr int kFaultyHashBits = 4;

template <bool kFaults>
BasicSequenceTable<kFaults>::BasicSequenceTable(const Config& config, const EngineOptions& options)
    : vocab_(config.vocab),
      max_pos_(config.max_pos),
      capacity_(options.capacity),
      max_rows_(options.max_rows),
      n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      kv_dtype_(options.kv_dtype),
      faults_(options.faults),
      row_owner_(size_t(options.max_rows), kNoSequence),
      row_fill_(size_t(options.max_rows), 0),
      row_position_(size_t(options.max_rows), 0),
      block_size_(options.block_size) {
  if (block_size_ > 0) {
    // Every live sequence at its capacity fits: a correct engine never runs dry.
    pool_blocks_ = options.pool_blocks > 0
                       ? options.pool_blocks
                       : max_rows_ * ((capacity_ + block_size_ - 1) / block_size_);
    refcount_.assign(size_t(pool_blocks_), 0);
    for (int b = pool_blocks_ - 1; b >= 0; --b) free_.push_back(b);
    prefix_cache_ = options.prefix_cache;
    if (prefix_cache_) index_ = PrefixIndex(pool_blocks_, block_size_);
  }
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::take_row(const char* call) {
  const auto free_row = std::find(row_owner_.begin(), row_owner_.end(), kNoSequence);
  if (free_row == row_owner_.end()) {
    throw EngineError(EngineError::Kind::kRows, std::string(call) + ": all " +
                                                    std::to_string(max_rows_) +
                                                    " rows are taken by running sequences "
                                                    "(max_rows)");
  }
  *free_row = next_id_;
  return static_cast<int>(free_row - row_owner_.begin());
}

template <bool kFaults>
SequenceId BasicSequenceTable<kFaults>::start(uint64_t cache_key) {
  const int row = take_row("start");
  const SequenceId id = next_id_++;
  SequenceState s;
  s.row = row;
  s.cache_key = cache_key;
  if (has(Fault::kResetKeepsKv)) s.slot_base = row_fill_[size_t(row)];
  if (has(Fault::kResetKeepsPosition)) s.position_base = row_position_[size_t(row)];
  sequences_[id] = s;
  return id;
}

template <bool kFaults>
const SequenceState& BasicSequenceTable<kFaults>::lookup(SequenceId id, const char* call) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    throw EngineError(EngineError::Kind::kUnknownSequence,
                      std::string(call) + ": sequence " + std::to_string(id) +
                          " is not running (never started, finished, or reset)");
  }
  return it->second;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::check_batch(std::span<const BatchEntry> batch) const {
  std::vector<SequenceId> seen;
  for (const BatchEntry& e : batch) {
    const SequenceState& s = lookup(e.sequence, "step");
    const std::string who = "step: sequence " + std::to_string(e.sequence);
    if (std::find(seen.begin(), seen.end(), e.sequence) != seen.end()) {
      throw EngineError(EngineError::Kind::kBadBatch, who + " appears twice in one batch");
    }
    seen.push_back(e.sequence);
    if (e.tokens.empty()) throw EngineError(EngineError::Kind::kBadBatch, who + ": empty chunk");
    for (size_t i = 0; i < e.tokens.size(); ++i) {
      if (e.tokens[i] < 0 || e.tokens[i] >= vocab_) {
        throw EngineError(EngineError::Kind::kBadToken, who + ", token " + std::to_string(i) +
                                                            ": id " + std::to_string(e.tokens[i]) +
                                                            " is outside the vocabulary [0, " +
                                                            std::to_string(vocab_) + ")");
      }
    }
    const long long end = (long long)s.slot_base + s.length + (long long)e.tokens.size();
    if (end > capacity_ && !has(Fault::kCapacityWraps)) {
      throw EngineError(EngineError::Kind::kCapacity,
                        who + ": appending " + std::to_string(e.tokens.size()) +
                            " tokens at position " + std::to_string(s.length) +
                            " exceeds the capacity of " + std::to_string(capacity_) + " positions");
    }
    // After an erase the cells no longer bound the positions: the next one
    // is the largest held + 1, and RoPE / wpe stop at max_pos.
    if (!s.positions.empty() &&
        (long long)s.next_position() + (long long)e.tokens.size() > max_pos_) {
      throw EngineError(EngineError::Kind::kCapacity,
                        who + ": appending " + std::to_string(e.tokens.size()) +
                            " tokens at position " + std::to_string(s.next_position()) +
                            " passes max_pos " + std::to_string(max_pos_));
    }
  }
}

template <bool kFaults>
std::vector<TokenPlan> BasicSequenceTable<kFaults>::make_plan(
    std::span<const BatchEntry> batch) const {
  std::vector<TokenPlan> plan;
  for (const BatchEntry& e : batch) {
    const SequenceState& s = sequences_.at(e.sequence);
    const int n = static_cast<int>(e.tokens.size());
    const int next = s.next_position();
    for (int i = 0; i < n; ++i) {
      const int pos = s.length + i;  // the cell written
      TokenPlan t{storage_row(s.row), s.position_base + next + i, s.slot_base + pos,
                  s.slot_base + pos + 1, n};
      if (has(Fault::kDecodePositionZero) && n == 1) t.position = 0;
      if (has(Fault::kChunkPositionRestart) && n > 1) t.position = i;
      if (has(Fault::kPositionLagAfterFirst) && s.chunks > 0) {
        t.position += 1, t.slot += 1, t.n_keys += 1;
      }
      if (has(Fault::kMaskTopLeft)) t.n_keys = s.slot_base + i + 1;
      if (has(Fault::kTruncateLate)) t.n_keys = std::max(t.n_keys, s.rolled_back_end);
      if (has(Fault::kAppendOverwrites)) t.slot = s.slot_base + i, t.n_keys = s.slot_base + i + 1;
      plan.push_back(t);
    }
  }
  return plan;
}

template <bool kFaults>
TokenPlan BasicSequenceTable<kFaults>::at_layer(TokenPlan t, int layer) const {
  // Only the per-layer counter fault makes layers disagree.
  if (has(Fault::kPositionBumpPerLayer) && layer > 0) {
    t.position += t.chunk_len, t.slot += t.chunk_len, t.n_keys += t.chunk_len;
  }
  t.slot %= capacity_;
  t.n_keys = std::min(t.n_keys, capacity_);
  t.position %= max_pos_;
  return t;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::commit(std::span<const BatchEntry> batch) {
  for (const BatchEntry& e : batch) {
    SequenceState& s = sequences_.at(e.sequence);
    if (!s.positions.empty()) {
      const int next = s.next_position();
      for (int i = 0; i < int(e.tokens.size()); ++i) s.positions.push_back(next + i);
    }
    s.length += static_cast<int>(e.tokens.size());
    s.chunks += 1;
    s.rolled_back_end = 0;
    row_fill_[size_t(s.row)] = std::max(row_fill_[size_t(s.row)], s.slot_base + s.length);
    row_position_[size_t(s.row)] = s.position_base + s.next_position();
    if (prefix_cache_) {
      s.tokens.insert(s.tokens.end(), e.tokens.begin(), e.tokens.end());
      register_blocks(s);
    }
  }
}

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
int BasicSequenceTable<kFaults>::cached_blocks() const {
  int n = 0;
  for (int b = 0; b < pool_blocks_; ++b) n += prefix_cache_ && cached(b);
  return n;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::finish(SequenceId id, const CopyRow& copy,
                                         const ClearRow& clear) {
  const SequenceState s = lookup(id, "finish");
  sequences_.erase(id);
  const int freed = s.row;
  row_owner_[size_t(freed)] = kNoSequence;
  // Compaction: every running sequence above the freed row moves down one,
  // so live rows stay dense at the front.
  int hole = freed;
  for (int r = freed + 1; r < max_rows_; ++r) {
    const SequenceId owner = row_owner_[size_t(r)];
    if (owner == kNoSequence) continue;
    if (!has(Fault::kCompactionTableOnly)) copy(storage_row(r), storage_row(hole));
    row_fill_[size_t(hole)] = row_fill_[size_t(r)];
    row_position_[size_t(hole)] = row_position_[size_t(r)];
    row_owner_[size_t(hole)] = owner;
    row_owner_[size_t(r)] = kNoSequence;
    sequences_.at(owner).row = hole;
    hole = r;
  }
  // The row left empty at the end holds nothing now.
  if (!has(Fault::kCompactionTableOnly) || hole == freed) clear(storage_row(hole));
  row_fill_[size_t(hole)] = 0;
  row_position_[size_t(hole)] = 0;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::reset(const ClearRow& clear) {
  sequences_.clear();
  std::fill(row_owner_.begin(), row_owner_.end(), kNoSequence);
  for (int r = 0; r < max_rows_; ++r) {
    if (!has(Fault::kResetKeepsKv)) {
      clear(r);
      row_fill_[size_t(r)] = 0;
    }
    if (!has(Fault::kResetKeepsPosition)) row_position_[size_t(r)] = 0;
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
  std::vector<int32_t> sorted = moved;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      who + ": shifting [" + std::to_string(p0) + ", " + std::to_string(p1) +
                          ") by " + std::to_string(delta) + " makes two cells hold one position");
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
CacheSnapshot BasicSequenceTable<kFaults>::snapshot_shell(SequenceId id, int layer) const {
  const SequenceState& s = lookup(id, "cache");
  if (layer < 0 || layer >= n_layers_) {
    throw EngineError(EngineError::Kind::kBadBatch, "cache: layer " + std::to_string(layer) +
                                                        " is outside [0, " +
                                                        std::to_string(n_layers_) + ")");
  }
  CacheSnapshot snap;
  snap.dtype = kv_dtype_;
  snap.length = std::min(s.slot_base + s.length, capacity_);
  snap.n_kv_heads = n_kv_heads_;
  snap.head_dim = head_dim_;
  snap.k.resize(size_t(snap.length) * size_t(n_kv_heads_) * size_t(head_dim_) *
                size_t(kv_dtype_bytes(kv_dtype_)));
  snap.v.resize(snap.k.size());
  if (!s.positions.empty()) {
    for (int i = 0; i < snap.length; ++i) {
      const int cell = i - s.slot_base;
      snap.positions.push_back(cell >= 0 && cell < s.length ? s.position_of(cell) : -1);
    }
  }
  return snap;
}

template <bool kFaults>
uint64_t BasicSequenceTable<kFaults>::metadata_bytes() const {
  uint64_t blocks = 0;
  for (const auto& [id, s] : sequences_) {
    blocks += s.blocks.size() * sizeof(int) + s.tokens.size() * sizeof(int32_t);
  }
  if (prefix_cache_) blocks += index_.bytes();
  return sequences_.size() * (sizeof(SequenceId) + sizeof(SequenceState)) + blocks +
         row_owner_.size() * (sizeof(SequenceId) + 2 * sizeof(int)) +
         (refcount_.size() + free_.size()) * sizeof(int);
}

template <bool kFaults>
const SequenceState& BasicSequenceTable<kFaults>::lookup_count(SequenceId id, int n,
                                                               const char* call) const {
  const SequenceState& s = lookup(id, call);
  if (n < 0 || n > s.length) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      std::string(call) + ": n " + std::to_string(n) + " is outside [0, " +
                          std::to_string(s.length) + "] (the length of sequence " +
                          std::to_string(id) + ")");
  }
  return s;
}

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
    free_.push_back(block);
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
      free_.push_back(block);
      poison(storage_block(block), 0, block_size_);
      continue;
    }
    release(block, poison);
  }
}

template <bool kFaults>
std::vector<int> BasicSequenceTable<kFaults>::prepare_step(std::span<const BatchEntry> batch,
                                                           const CopySlots& copy,
                                                           const PoisonSlots& poison) {
  std::vector<int> reused(batch.size(), 0);  // [entry] tokens taken from the prefix cache
  if (!paged()) return reused;
  // Prefix hits, found before anything changes: the longest run of whole
  // cached blocks matching the chunk's leading tokens. The hit reuses at most
  // n - 1 tokens of them, so that the last token's logits are computed: when
  // the whole chunk is cached, the last block is shared and copied before the
  // last token is written into it (it is registered, so never written).
  std::vector<std::vector<int>> hits(batch.size());  // [entry][logical block]
  std::vector<int> matched(batch.size(), 0);         // [entry] tokens reused, k
  std::vector<bool> partial(batch.size(), false);    // [entry] k ends inside the last hit block
  std::vector<bool> extra(batch.size(), false);      // [entry] the fault's extra block
  std::vector<bool> in_hit(size_t(pool_blocks_), false);
  if (prefix_cache_) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const SequenceState& s = sequences_.at(batch[i].sequence);
      if (s.length != 0 || s.slot_base != 0) continue;
      const int n = static_cast<int>(batch[i].tokens.size());
      hits[i] = index_.match(batch[i].tokens, n / block_size_,
                             has(Fault::kPrefixHashOnly) ? kFaultyHashBits : 64, index_key(s));
      // A one-token chunk reuses nothing (its token is the last one).
      if (n == 1) hits[i].clear();
      const int covered = static_cast<int>(hits[i].size()) * block_size_;
      matched[i] = std::min(covered, n - 1);
      partial[i] = matched[i] < covered;
      // Fault: a one-block hit also takes the block chained after it.
      if (has(Fault::kPrefixHitExtraBlock) && hits[i].size() == 1 && n > block_size_) {
        if (const int next = index_.child_of(hits[i][0]); next >= 0) {
          hits[i].push_back(next);
          extra[i] = true;
        }
      }
      for (const int b : hits[i]) in_hit[size_t(b)] = true;
    }
  }
  const auto cow_block = [&](const SequenceState& s) -> int {
    const int first = s.slot_base + s.length;
    const size_t index = size_t(first / block_size_);
    if (first >= capacity_ || index >= s.blocks.size()) return -1;
    const int block = s.blocks[index];
    const bool shared = refcount_[size_t(block)] > 1 || (prefix_cache_ && index_.registered(block));
    return shared && !has(Fault::kCowSkipped) ? block : -1;
  };
  // New blocks for `more` slots after the sequence's length, `held` blocks in hand.
  const auto blocks_needed = [&](const SequenceState& s, int more, size_t held) {
    const int end = std::min(s.slot_base + s.length + more, capacity_);
    return std::max(0, blocks_for(end) - static_cast<int>(held));
  };
  const auto chunk = [&](size_t i) { return static_cast<int>(batch[i].tokens.size()); };
  // Entries copy in batch order, each dropping a reference to the shared
  // block: the last writer of a block shared within the batch copies nothing
  // (unless it is registered: registered contents never change).
  size_t needed = 0, evictable = 0;
  const auto count = [&] {
    needed = 0;
    std::map<int, int> references;  // [shared block] references left while counting
    for (size_t i = 0; i < batch.size(); ++i) {
      const SequenceState& s = sequences_.at(batch[i].sequence);
      needed += size_t(blocks_needed(s, chunk(i), std::max(s.blocks.size(), hits[i].size())));
      if (!hits[i].empty()) {
        needed += partial[i];  // the copy of the last hit block
        continue;
      }
      if (const int shared = cow_block(s); shared >= 0) {
        auto [it, fresh] = references.try_emplace(shared, refcount_[size_t(shared)]);
        if (it->second > 1 || (prefix_cache_ && index_.registered(shared))) ++needed;
        --it->second;
      }
    }
    // Cached blocks a hit takes cannot be evicted to make room.
    evictable = 0;
    for (int b = 0; b < pool_blocks_; ++b) {
      evictable += prefix_cache_ && cached(b) && !in_hit[size_t(b)];
    }
  };
  count();
  if (needed > free_.size() + evictable &&
      std::find(partial.begin(), partial.end(), true) != partial.end()) {
    // The copy of a fully cached chunk's last block is the one block a hit
    // may need beyond the sequence's share: without room for it, the hit
    // stops a block earlier (so the default pool never runs dry).
    std::fill(in_hit.begin(), in_hit.end(), false);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (partial[i]) hits[i].pop_back(), partial[i] = false;
      matched[i] = std::min<int>(matched[i], static_cast<int>(hits[i].size()) * block_size_);
      for (const int b : hits[i]) in_hit[size_t(b)] = true;
    }
    count();
  }
  if (needed > free_.size() + evictable) {
    const std::string message = "step: the pool has " + std::to_string(free_.size()) +
                                " free and " + std::to_string(evictable) +
                                " evictable cached blocks of " + std::to_string(pool_blocks_) +
                                "; this step needs " + std::to_string(needed);
    if (has(Fault::kRefusalLeavesHalfTable)) {
      // Fault: tables grow entry by entry until the free list runs dry.
      for (size_t i = 0; i < batch.size(); ++i) {
        SequenceState& s = sequences_.at(batch[i].sequence);
        for (int k = blocks_needed(s, chunk(i), s.blocks.size()); k > 0 && !free_.empty(); --k) {
          s.blocks.push_back(allocate_block(poison));
        }
      }
    }
    throw EngineError(EngineError::Kind::kCapacity, message);
  }
  // Every hit takes its blocks before any allocation can evict one.
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = sequences_.at(batch[i].sequence);
    s.reused = reused[i] = matched[i];
    if (hits[i].empty()) continue;
    for (const int b : hits[i]) {
      ++refcount_[size_t(b)];
      index_.touch(b);
    }
    s.blocks = hits[i];
    s.tokens.assign(batch[i].tokens.begin(), batch[i].tokens.begin() + matched[i]);
    s.length = matched[i];
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = sequences_.at(batch[i].sequence);
    const int k = matched[i];
    // The fault's extra block is written in place: it skips the copy.
    if (const int shared = extra[i] ? -1 : cow_block(s); shared >= 0) {
      const int own = allocate_block(poison);
      copy(storage_block(shared), storage_block(own), (s.slot_base + s.length) % block_size_);
      s.blocks[size_t((s.slot_base + s.length) / block_size_)] = own;
      release(shared, poison);  // others still hold it; what only this one used is poisoned
    }
    for (int more = blocks_needed(s, chunk(i) - k, s.blocks.size()); more > 0; --more) {
      s.blocks.push_back(allocate_block(poison));
    }
  }
  return reused;
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
  for (const int count : refcount_) r.used += count > 0;
  r.cached = cached_blocks();
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

template class BasicSequenceTable<true>;
template class BasicSequenceTable<false>;

std::string storage_options_error(const EngineOptions& options) {
  std::ostringstream out;
  if (options.block_size < 0 || options.block_size > 32) {
    out << "block_size: " << options.block_size << " is out of range [0 (contiguous), 32]";
  } else if (options.pool_blocks < 0 || options.pool_blocks > (1 << 20) ||
             (options.pool_blocks > 0 && options.block_size == 0)) {
    out << "pool_blocks: " << options.pool_blocks
        << " is out of range [0, 2^20] (and needs block_size > 0)";
  } else if (options.prefix_cache && options.block_size == 0) {
    out << "prefix_cache: needs paged storage (block_size > 0)";
  }
  return out.str();
}

std::span<const BatchEntry> computed_part(std::span<const BatchEntry> batch,
                                          const std::vector<int>& reused,
                                          std::vector<BatchEntry>& trimmed) {
  if (std::all_of(reused.begin(), reused.end(), [](int k) { return k == 0; })) return batch;
  trimmed.assign(batch.begin(), batch.end());
  for (size_t i = 0; i < batch.size(); ++i) {
    trimmed[i].tokens = batch[i].tokens.subspan(size_t(reused[i]));
  }
  return trimmed;
}

void spread_reused_rows(std::span<const BatchEntry> batch, const std::vector<int>& reused,
                        int vocab, std::vector<float>& logits) {
  if (std::all_of(reused.begin(), reused.end(), [](int k) { return k == 0; })) return;
  const size_t V = size_t(vocab);
  size_t total = 0;
  for (const BatchEntry& e : batch) total += e.tokens.size();
  std::vector<float> all(total * V, std::numeric_limits<float>::quiet_NaN());  // [sum of n][V]
  size_t at = 0, from = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t rows = batch[i].tokens.size() - size_t(reused[i]);
    std::copy_n(logits.begin() + std::ptrdiff_t(from * V), rows * V,
                all.begin() + std::ptrdiff_t((at + size_t(reused[i])) * V));
    at += batch[i].tokens.size();
    from += rows;
  }
  logits = std::move(all);
}

}  // namespace kvcheck
