// The host-side bookkeeping every engine shares: which sequence owns which
// cache row, how far each has been fed, where each fed token goes (its
// position, slot and visible keys, faults included), and what finish and
// reset do to the rows. Engines keep only the arithmetic and the storage;
// the CPU and CUDA engines therefore agree on every fault's semantics by
// construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/prefix_index.h"

namespace kvcheck {

// Per-sequence bookkeeping. `slot_base` and `position_base` are 0 in a correct
// engine; only the reset faults make a new sequence inherit a row's leftovers.
struct SequenceState {
  int row = 0;                  // index into the row table
  int length = 0;               // tokens fed = the next absolute position
  int chunks = 0;               // steps that fed this sequence
  int last_fed = 0;             // tokens its last step fed (the fault offload_before_write)
  int slot_base = 0;            // first slot of this sequence's own data in its row
  int position_base = 0;        // added to its positions
  std::vector<int> blocks;      // paged: [logical block] pool block holding slots b*B..b*B+B-1
  std::vector<int32_t> tokens;  // prefix cache: [position] the content, to register full blocks
  int reused = 0;           // prefix cache: leading tokens of its last step taken from the cache
  int rolled_back_end = 0;  // fault truncate_late: keys the next step still sees, else 0
  uint64_t cache_key = 0;   // prefix cache: blocks are shared only within one key
  // Context shift: [slot - slot_base] the position each cell holds, kept
  // only once an erase or shift moved one (empty: cell i holds position i).
  std::vector<int32_t> positions;

  // The position cell i holds, and where the next fed token goes: the
  // largest held position + 1 (llama.cpp's seq_pos_max + 1; 0 when empty).
  int position_of(int i) const { return positions.empty() ? i : positions[size_t(i)]; }
  int next_position() const {
    if (positions.empty()) return length;
    int next = 0;
    for (int32_t p : positions) next = std::max(next, p + 1);
    return next;
  }
};

// Where one fed token goes, as the engine computes it (faults included).
struct TokenPlan {
  int row;        // storage row
  int position;   // RoPE / wpe position
  int slot;       // cache slot written
  int n_keys;     // slots 0..n_keys-1 of the row are visible to this query
  int chunk_len;  // length of the chunk it belongs to
};

// kFaults = false compiles every fault branch away (the benchmark build that
// shows the switches cost nothing when off).
template <bool kFaults>
class BasicSequenceTable {
 public:
  using CopyRow = std::function<void(int from_storage_row, int to_storage_row)>;
  using ClearRow = std::function<void(int storage_row)>;
  // Storage-level moves of the operations. A "unit" is a row in contiguous
  // mode and a pool block in paged mode; slots are within the unit.
  using CopySlots = std::function<void(int from_unit, int to_unit, int n_slots)>;
  using PoisonSlots = std::function<void(int unit, int first_slot, int end_slot)>;

  BasicSequenceTable(const Config& config, const EngineOptions& options);

  bool has(Fault f) const {
    if constexpr (kFaults) {
      return faults_.has(f);
    } else {
      (void)f;
      return false;
    }
  }
  int storage_row(int row) const { return has(Fault::kSharedRows) ? 0 : row; }
  int storage_layer(int layer) const { return has(Fault::kSharedLayerCache) ? 0 : layer; }

  // A new sequence in the lowest free row; throws kRows when all are taken.
  // Its prefix-cache blocks are shared only with sequences of the same
  // cache key (0: none); a fork's child has its parent's.
  SequenceId start(uint64_t cache_key = 0);

  // Throws kUnknownSequence, naming `call`.
  const SequenceState& lookup(SequenceId id, const char* call) const;
  // lookup, and kBadBatch unless 0 <= n <= its length (fork, truncate).
  const SequenceState& lookup_count(SequenceId id, int n, const char* call) const;

  // Every check of a step, before anything changes: unknown or repeated
  // sequences, empty chunks, tokens outside [0, vocab), capacity.
  void check_batch(std::span<const BatchEntry> batch) const;

  // Every fed token of the batch, in batch order.
  std::vector<TokenPlan> make_plan(std::span<const BatchEntry> batch) const;

  // A token's plan as seen from one layer, wrapped into the row so that even
  // a faulty engine stays memory-safe.
  TokenPlan at_layer(TokenPlan t, int layer) const;

  // After the step's arithmetic: advances lengths and the rows' counters;
  // with a prefix cache, registers the full blocks the step completed.
  void commit(std::span<const BatchEntry> batch);

  // EOS with compaction: rows above the freed one move down one. The engine
  // moves the data through `copy` and empties rows through `clear`.
  void finish(SequenceId id, const CopyRow& copy, const ClearRow& clear);

  // Drops every sequence; `clear` empties the rows a correct reset empties.
  void reset(const ClearRow& clear);

  // ---- Operations of docs/OPERATIONS.md -------------------------------
  bool paged() const { return block_size_ > 0; }
  int block_size() const { return block_size_; }
  int pool_blocks() const { return pool_blocks_; }
  // Paged: the host tier's blocks are numbered after the device pool's, so
  // that a block table, a storage unit and a snapshot read need not know
  // the tier: storage holds storage_units() blocks, device ones first.
  int host_blocks() const { return host_blocks_; }
  int storage_units() const { return pool_blocks_ + host_blocks_; }

  // Moves every device block of the sequence's table to the host tier
  // (copied whole through `copy`; the device block is freed, poisoned).
  // A shared block moves once and every table holding it follows; a
  // registered one leaves the prefix cache first. kCapacity, changing
  // nothing, when the host tier has too few free blocks; kBadBatch without
  // a host tier. The next step that feeds a sequence holding host blocks
  // brings them back (prepare_step).
  void offload(SequenceId id, const CopySlots& copy, const PoisonSlots& poison);

  // A new sequence in the lowest free row holding `parent`'s first n
  // tokens: copied (contiguous) or shared block by block (paged).
  SequenceId fork(SequenceId parent, int n, const CopySlots& copy);

  // Forgets the last n tokens; the freed tail is poisoned at once.
  void truncate(SequenceId id, int n, const PoisonSlots& poison);

  // Context shift (contiguous storage only; kBadBatch when paged). erase
  // removes the cells holding positions [p0, p1): the later cells move down
  // through `move` (row, from slot, to slot, count) and the freed tail is
  // poisoned. shift adds delta to the positions of the cells in [p0, p1)
  // and has the engine re-rotate each one's key through `rotate` (row,
  // slot, angle delta), faults included; kBadBatch, changing nothing, when
  // a position would leave [0, max_pos) or meet a cell outside the range
  // (cells sharing a position after a div may keep sharing it).
  using MoveSlots = std::function<void(int row, int from_slot, int to_slot, int n_slots)>;
  using RotateSlot = std::function<void(int row, int slot, int delta)>;
  void erase(SequenceId id, int p0, int p1, const MoveSlots& move, const PoisonSlots& poison);
  void shift(SequenceId id, int p0, int p1, int delta, const RotateSlot& rotate);
  // div divides the positions of the cells in [p0, p1) by d (rounding
  // down) and has each moved cell's key re-rotated by its own change
  // through `rotate`; cells may come to share a position. kBadBatch,
  // changing nothing, when d < 1.
  void div(SequenceId id, int p0, int p1, int d, const RotateSlot& rotate);

  // Sequence state (contiguous storage; kBadBatch when paged). save keeps
  // the sequence's bookkeeping and the bytes `read` returns for its slots
  // (the engine's K/V of every layer), replacing an earlier save. restore
  // returns the sequence to it: `write` puts the bytes back at its first
  // slot and the slots it held past them are poisoned; kBadBatch, changing
  // nothing, for a sequence never saved. finish and reset drop the save.
  using ReadSlots = std::function<std::vector<uint8_t>(int row, int first_slot, int end_slot)>;
  using WriteSlots = std::function<void(int row, int first_slot, std::span<const uint8_t> bytes)>;
  void save(SequenceId id, const ReadSlots& read);
  void restore(SequenceId id, const WriteSlots& write, const PoisonSlots& poison);

  // Paged: before a step's writes, gives every fed sequence blocks of its
  // own for the slots it will write (copy on write of a shared or
  // registered block, new blocks from the free list, then evicted cached
  // blocks). With a prefix cache, a sequence of length 0 first takes the
  // longest run of cached blocks matching its chunk's leading tokens and
  // reuses k = min(their tokens, n - 1) of them: its length advances by k.
  // Returns k per entry (the caller computes only the rest of the chunk). Throws
  // kCapacity, changing nothing, when the pool cannot supply the blocks.
  // All zeros, and nothing else, when contiguous.
  std::vector<int> prepare_step(std::span<const BatchEntry> batch, const CopySlots& copy,
                                const PoisonSlots& poison);

  // Prefix cache: forgets every registration; cached blocks become free,
  // poisoned.
  void flush_prefix_cache(const PoisonSlots& poison);
  bool prefix_cache() const { return prefix_cache_; }

  // Paged: finish and reset without row compaction; blocks whose last
  // reference goes are poisoned through `poison`.
  void finish_paged(SequenceId id, const PoisonSlots& poison);
  // Paged: a request cancelled mid-prefill ends as finish_paged ends it
  // (the fault abort_frees_cached lives here).
  void abort_paged(SequenceId id, const PoisonSlots& poison);
  void reset_paged(const PoisonSlots& poison);

  // Paged: the storage block and slot of `slot` of the sequence in `row`;
  // slots past its table resolve to `missing` (a block the engine keeps
  // poisoned, or a write sink) so a faulty plan stays memory-safe.
  std::pair<int, int> locate(int row, int slot, int missing) const;
  // Paged: the block table of the sequence in `row` ([logical block]).
  const std::vector<int>& blocks_of_row(int row) const;
  int storage_block(int block) const { return has(Fault::kBlockAliasing) ? block & ~1 : block; }

  PoolReport pool_report() const;
  int reused(SequenceId id) const { return lookup(id, "reused").reused; }

  // Slots no sequence holds, per unit: units() units of `unit_slots()`
  // slots; held_slots(u) is the count of leading slots some sequence holds
  // (the rest must be poisoned).
  int units() const { return paged() ? storage_units() : max_rows_; }
  int unit_slots() const { return paged() ? block_size_ : capacity_; }
  int held_slots(int unit) const;

  // Engine::unheld_storage_check over the engine's storage: the first
  // element of a slot no sequence holds that is not poisoned, as a message
  // naming it ("" when there is none). `poisoned(key, layer, storage_unit,
  // kv_head, slot, d)` reads one element of K (key) or V.
  using IsPoisoned =
      std::function<bool(bool key, int layer, int storage_unit, int kv_head, int slot, int d)>;
  std::string unheld_storage_check(const IsPoisoned& poisoned) const;

  // An empty snapshot of `id` in `layer`, sized for every slot its queries
  // can see (its own, plus any prefix a faulty reset left in the row); the
  // engine copies the stored K/V into it. Throws for an unknown sequence or
  // a layer outside [0, n_layers).
  CacheSnapshot snapshot_shell(SequenceId id, int layer) const;

  uint64_t metadata_bytes() const;

  // Who holds each of `units` storage units (rows, or pool blocks when
  // paged; units past the table's own hold nothing) and how many leading
  // slots of it their lengths cover, faults included: the storage map's
  // holders and held_slots.
  void storage_holding(int units, std::vector<std::vector<SequenceId>>& holders,
                       std::vector<int>& held) const;

 private:
  static constexpr SequenceId kNoSequence = -1;

  int vocab_, max_pos_, capacity_, max_rows_;
  int n_layers_, n_kv_heads_, head_dim_;
  KvDtype kv_dtype_;
  FaultSet faults_;
  std::map<SequenceId, SequenceState> sequences_;
  std::vector<SequenceId> row_owner_;  // [row] running sequence or kNoSequence
  std::vector<int> row_fill_;          // [row] slots holding data
  std::vector<int> row_position_;      // [row] position counter of the row's last sequence
  SequenceId next_id_ = 0;
  // Sequence state: the last save of each sequence (contiguous storage).
  struct SavedState {
    SequenceState state;         // its bookkeeping at the save
    std::vector<uint8_t> bytes;  // [layer][K, V][kv_head][slot][kv_row_bytes] its slots
  };
  std::map<SequenceId, SavedState> saved_;

  // Paged pool (empty when contiguous).
  int block_size_ = 0, pool_blocks_ = 0;
  std::vector<int> refcount_;   // [block] references held by block tables
  std::vector<int> free_;       // free blocks, the next to hand out last
  int host_blocks_ = 0;         // the host tier: blocks pool_blocks_ .. storage_units() - 1
  std::vector<int> host_free_;  // free host blocks, the next to hand out last
  bool prefix_cache_ = false;
  bool aborting_ = false;  // inside abort_paged: its releases may take the fault's path
  PrefixIndex index_;      // registered (full, written) blocks; refcount 0 ones are "cached"

  int take_row(const char* call);
  // erase and shift: checks the sequence, the range [p0, p1) and the
  // storage (kBadBatch naming `call`); the positions of its cells.
  std::vector<int32_t> held_positions(SequenceId id, int p0, int p1, const char* call) const;
  int blocks_for(int slots) const { return (slots + block_size_ - 1) / block_size_; }
  // The key the index sees (the fault prefix_ignores_key drops it).
  uint64_t index_key(const SequenceState& s) const {
    return has(Fault::kPrefixIgnoresKey) ? 0 : s.cache_key;
  }
  bool cached(int block) const { return refcount_[size_t(block)] == 0 && index_.registered(block); }
  // Cached blocks numbered [first, end) (a tier).
  int cached_blocks(int first, int end) const;
  bool on_host(int block) const { return block >= pool_blocks_; }
  // A block no table holds goes back to its tier's free list.
  void give_back(int block) { (on_host(block) ? host_free_ : free_).push_back(block); }
  // Every table holding `from` holds `to` instead, with its references;
  // `from` is left unreferenced.
  void retarget(int from, int to);
  // The host blocks the tables of the batch's sequences hold (distinct),
  // which the step brings back before its writes.
  std::vector<int> host_blocks_of(std::span<const BatchEntry> batch) const;
  void bring_back(std::span<const BatchEntry> batch, const PoisonSlots& poison,
                  const CopySlots& copy);
  // prepare_step's parts (sequence_table_prepare-inl.h).
  struct StepHits {
    std::vector<std::vector<int>> blocks;  // [entry][logical block] the cached blocks taken
    std::vector<int> matched;              // [entry] tokens reused, k
    std::vector<bool> partial;             // [entry] k ends inside the last hit block
    std::vector<bool> extra;               // [entry] the fault's extra block
    std::vector<bool> in_hit;              // [pool block] some entry's hit takes it
  };
  StepHits find_prefix_hits(std::span<const BatchEntry> batch) const;
  // The shared block the sequence's next write lands in (copied first), or -1.
  int cow_block(const SequenceState& s) const;
  // New blocks for `more` slots after the sequence's length, `held` in hand.
  int blocks_needed(const SequenceState& s, int more, size_t held) const;
  // Blocks the step needs (reloads from the host tier included), and the
  // cached blocks that may be evicted for them.
  std::pair<size_t, size_t> step_demand(std::span<const BatchEntry> batch, const StepHits& hits,
                                        size_t reloads) const;
  [[noreturn]] void refuse_step(std::span<const BatchEntry> batch, size_t needed, size_t evictable,
                                size_t reloads, const PoisonSlots& poison);
  void take_hits(std::span<const BatchEntry> batch, const StepHits& hits, std::vector<int>& reused);
  void allocate_step_blocks(std::span<const BatchEntry> batch, const StepHits& hits,
                            const CopySlots& copy, const PoisonSlots& poison);
  // A free block, else the least recently used cached one (evicted:
  // unregistered with every block chained after it, poisoned).
  int allocate_block(const PoisonSlots& poison);
  void evict(int block, const PoisonSlots& poison);
  // Registers the full blocks of `s` that are written and not yet registered.
  void register_blocks(const SequenceState& s);
  // Drops one reference; a block no table holds goes back, poisoned, and a
  // still-held one has its slots beyond every holder's use poisoned.
  void release(int block, const PoisonSlots& poison);
  void drop_blocks(SequenceState& s, const PoisonSlots& poison, bool finishing);
};

using SequenceTable = BasicSequenceTable<true>;

// What an engine with this table refuses in its options' storage fields
// (block_size, pool_blocks, prefix_cache), as a message naming the field and
// value; "" when they are valid.
std::string storage_options_error(const EngineOptions& options);

// A step with prefix hits computes only each entry's tokens after its `reused`
// ones (prepare_step's result): the batch without them, kept in `trimmed`.
std::span<const BatchEntry> computed_part(std::span<const BatchEntry> batch,
                                          const std::vector<int>& reused,
                                          std::vector<BatchEntry>& trimmed);

// Logits of the computed tokens, [computed][vocab], become the batch's
// [sum of n][vocab]: each entry's reused rows first, NaN (never computed).
void spread_reused_rows(std::span<const BatchEntry> batch, const std::vector<int>& reused,
                        int vocab, std::vector<float>& logits);

}  // namespace kvcheck
