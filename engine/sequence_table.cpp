// The sequence rows of the table: which sequence owns which row, how far
// each has been fed, where each fed token goes (faults included), and what
// finish and reset do to the rows. The pool, the step's block preparation
// and the operations that edit a sequence's content are in the -inl.h
// files included at the end, so that the two instantiations (faults on,
// faults off) are made once, in this translation unit.
#include "engine/sequence_table.h"

#include <algorithm>
#include <string>

namespace kvcheck {

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
    host_blocks_ = options.host_blocks;
    refcount_.assign(size_t(storage_units()), 0);
    for (int b = pool_blocks_ - 1; b >= 0; --b) free_.push_back(b);
    for (int b = storage_units() - 1; b >= pool_blocks_; --b) host_free_.push_back(b);
    prefix_cache_ = options.prefix_cache;
    // Sized for both tiers so that any block may be asked; only device
    // blocks are ever registered.
    if (prefix_cache_) index_ = PrefixIndex(storage_units(), block_size_);
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
    s.last_fed = static_cast<int>(e.tokens.size());
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
void BasicSequenceTable<kFaults>::finish(SequenceId id, const CopyRow& copy,
                                         const ClearRow& clear) {
  const SequenceState s = lookup(id, "finish");
  sequences_.erase(id);
  saved_.erase(id);
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
  saved_.clear();
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
         (refcount_.size() + free_.size() + host_free_.size()) * sizeof(int);
}

}  // namespace kvcheck

#include "engine/sequence_table_edit-inl.h"
#include "engine/sequence_table_offload-inl.h"
#include "engine/sequence_table_pool-inl.h"
#include "engine/sequence_table_prepare-inl.h"
#include "engine/sequence_table_state-inl.h"

namespace kvcheck {

template class BasicSequenceTable<true>;
template class BasicSequenceTable<false>;

}  // namespace kvcheck
