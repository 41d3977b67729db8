// The one interface the properties see. The CPU engine, the CUDA engine, the
// fault switches and users' own engines all plug in here, so it stays small
// and says nothing about how an engine computes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/faults.h"
#include "engine/kv_dtype.h"
#include "engine/storage_map.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

using SequenceId = int64_t;

// One entry of a step: a chunk of n tokens appended at the sequence's next n
// absolute positions. n == 1 is a decode; n > 1 a prefill chunk.
struct BatchEntry {
  SequenceId sequence;
  std::span<const int32_t> tokens;  // [n]
};

// Reference kernels (plain scalar loops) or the optimized ones (SIMD on the
// CPU). Both are invariant; they need not agree bitwise with each other.
enum class KernelPath : uint8_t { kReference, kOptimized };

struct EngineOptions {
  int capacity = 256;  // positions per sequence
  int max_rows = 8;    // sequences alive at once
  KvDtype kv_dtype = KvDtype::kF32;
  KernelPath kernels = KernelPath::kOptimized;
  int threads = 1;  // split output elements, never a reduction
  FaultSet faults;  // all off by default
  // Paged storage (docs/OPERATIONS.md): 0 keeps each sequence in its own
  // contiguous row; B in [1, 32] stores K/V in a pool of blocks of B slots.
  int block_size = 0;
  int pool_blocks = 0;  // blocks in the pool; 0: max_rows * ceil(capacity / B)
  // Prefix cache (paged only): full written blocks are kept for reuse by a
  // new sequence whose first chunk starts with the same tokens.
  bool prefix_cache = false;
  // Prefix cache: a hit's reused rows get the logits a cold run computes
  // (operations.prompt_logits; docs/OPERATIONS.md, "Prompt logits on a
  // hit") instead of NaN.
  bool prompt_logits = false;
  // A second memory tier (paged only; docs/OPERATIONS.md, "Offload"): host
  // blocks that offload() moves a sequence's blocks to; 0: no host tier.
  int host_blocks = 0;
};

// Misuse the engine refuses. The engine stays usable and no sequence's state
// changed when one is thrown.
class EngineError : public std::runtime_error {
 public:
  enum class Kind { kCapacity, kRows, kUnknownSequence, kBadBatch, kBadToken, kDevice };
  EngineError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// Answers of the engine that contradict each other, seen by a transport that
// gets them apart (an exec: child's cache reply whose length, from the
// engine's length(), disagrees with the K/V its cache() returned): the
// engine's failure, a property verdict, never a protocol matter. The engine
// stays usable.
class EngineInconsistency : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One sequence's cached K and V in one layer, copied exactly as stored.
struct CacheSnapshot {
  KvDtype dtype = KvDtype::kF32;
  int length = 0;          // positions cached (= tokens fed)
  int n_kv_heads = 0;      // KVH
  int head_dim = 0;        // D
  std::vector<uint8_t> k;  // [length][KVH][D] elements of dtype (q8_0: int8 codes)
  std::vector<uint8_t> v;  // [length][KVH][D] elements of dtype (q8_0: int8 codes)
  // Optional, for the operations that move or quantize slots: the absolute
  // position each slot holds (empty: slot i holds position i), and for a
  // quantized dtype the per-block scales of k and v (empty otherwise).
  std::vector<int32_t> positions;  // [length]
  std::vector<float> k_scales;     // [length][KVH][blocks per head]
  std::vector<float> v_scales;     // [length][KVH][blocks per head]

  // Widened to float (exact for every dtype but q8_0, whose code * scale is
  // the one float product the engine's kernels compute).
  float k_at(int pos, int kv_head, int d) const;
  float v_at(int pos, int kv_head, int d) const;
  // q8_0 only: the stored scale of block `block` (elements 32 block ..).
  float k_scale(int pos, int kv_head, int block) const;
  float v_scale(int pos, int kv_head, int block) const;
};

struct MemoryReport {
  uint64_t kv_bytes = 0;        // exactly 2*L*rows*capacity*KVH*kv_row_bytes(dtype, D)
  uint64_t weight_bytes = 0;    // packed weights the engine reads
  uint64_t scratch_bytes = 0;   // activations, grown to the largest step seen
  uint64_t metadata_bytes = 0;  // sequence and row tables
};

// The paged pool as the engine keeps it. A block is free (on the free list),
// used (held by at least one block table) or cached (held by no table, kept
// for prefix reuse); free + used + cached == total, in each tier. Device
// blocks are numbered 0 .. total - 1, the host tier's (if any) after them,
// total .. total + host_total - 1; a table holds a block in either tier.
struct PoolReport {
  int block_size = 0;  // slots per block; 0: contiguous storage (no pool)
  int total = 0, free = 0, used = 0, cached = 0;
  int host_total = 0, host_free = 0, host_used = 0, host_cached = 0;  // 0: no host tier
  std::vector<int> refcounts;  // [total + host_total] the engine's reference count of each block
  std::vector<std::pair<SequenceId, std::vector<int>>> tables;  // per sequence: [block index]
};

class Pipeline;  // engine/pipeline.h

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const Config& config() const = 0;
  virtual const EngineOptions& options() const = 0;
  virtual std::string name() const = 0;

  // Starts an empty sequence in a free row. Throws kRows when all are taken.
  virtual SequenceId start() = 0;

  // start, for a request with a cache key (a cache salt, a LoRA adapter id;
  // docs/OPERATIONS.md, "Cache keys"): its prefix-cache blocks are shared
  // only with sequences of the same key. Key 0 is start(); any other key
  // throws kBadBatch unless operations.cache_keys is declared.
  virtual SequenceId start_keyed(uint64_t cache_key);

  // Appends every entry's chunk and writes the logits of every fed token,
  // [sum of n][V], entries in batch order. A sequence appears at most once.
  // The whole batch is checked before anything changes.
  virtual void step(std::span<const BatchEntry> batch, std::vector<float>& logits) = 0;

  // EOS: frees the sequence's row; compaction may move other rows.
  virtual void finish(SequenceId sequence) = 0;

  // A request cancelled before its stream was fed (between prefill chunks,
  // docs/OPERATIONS.md, "Abort"): the sequence goes as finish ends it, and
  // only blocks it wrote whole stay in the prefix cache. An engine whose
  // abort is its finish keeps this default (operations.abort false).
  virtual void abort(SequenceId sequence) { finish(sequence); }

  // Drops every sequence.
  virtual void reset() = 0;

  // Optional operations, declared through OperationTraits (fork, truncate,
  // pool_report, storage_check); the defaults throw EngineError kBadBatch
  // naming the call, so an engine without them still compiles and says so.
  // docs/OPERATIONS.md gives their semantics and oracle.

  // A new running sequence whose cache starts as `parent`'s first n tokens
  // (0 <= n <= length(parent)). Throws kRows when no row is free.
  virtual SequenceId fork(SequenceId parent, int n);

  // Forgets the last n tokens of `sequence` (0 <= n <= its length); it goes
  // on as if they had never been fed.
  virtual void truncate(SequenceId sequence, int n);

  // Context shift (docs/OPERATIONS.md, "Erase and shift"; RoPE models).
  // erase: removes the cells holding positions [p0, p1), 0 <= p0 <= p1,
  // leaving a gap in the positions; the next fed token goes at the largest
  // cached position + 1. shift: adds delta to the positions of the cells in
  // [p0, p1) and re-rotates their keys by delta (values unchanged); throws
  // kBadBatch, changing nothing, when a position would go negative, reach
  // max_pos or collide with a cell outside the range.
  virtual void erase(SequenceId sequence, int p0, int p1);
  virtual void shift(SequenceId sequence, int p0, int p1, int delta);
  // div (docs/OPERATIONS.md, "Div"; llama.cpp's llama_memory_seq_div): the
  // cells holding positions [p0, p1) now hold position / d (rounded down),
  // each key re-rotated by its own change; cells may come to share a
  // position. kBadBatch, changing nothing, when d < 1.
  virtual void div(SequenceId sequence, int p0, int p1, int d);

  // Paged storage: the pool's block counts, reference counts and tables.
  virtual PoolReport pool() const;

  // Debug read of raw storage: empty when every slot no sequence holds is
  // poisoned (NaN), else where the first one that is not lies.
  virtual std::string unheld_storage_check() const;

  // Prefix cache (operations.prefix_cache): how many leading tokens of the
  // sequence's last step were taken from the cache instead of computed; their
  // logits rows are NaN, or a cold run's with EngineOptions::prompt_logits. 0 by default (an engine
  // without a prefix cache).
  virtual int reused(SequenceId sequence) const;

  // Prefix cache: forgets every cached block; those no table holds become
  // free (poisoned). Running sequences keep their blocks.
  virtual void flush_prefix_cache();

  // A second memory tier (operations.offload, EngineOptions::host_blocks):
  // moves every block of the sequence's table held in device memory to the
  // host tier. A shared block moves once and every holder's table follows
  // it. A later step that feeds the sequence brings its blocks back first;
  // fork, truncate, cache() and finish work on either tier. Throws
  // kCapacity, changing nothing, when the host tier cannot take them.
  virtual void offload(SequenceId sequence);

  // Sequence state (operations.save_restore; docs/OPERATIONS.md, "Save and
  // restore"; llama.cpp's llama_state_seq_get_data / set_data). save_state
  // keeps a copy of the sequence's state (cells, positions, K/V), replacing
  // the one it kept before; restore_state returns the sequence to exactly
  // that state, and later steps continue from it. A finish, abort or reset
  // drops the copy. restore_state throws kBadBatch, changing nothing, for a
  // sequence never saved.
  virtual void save_state(SequenceId sequence);
  virtual void restore_state(SequenceId sequence);

  virtual int length(SequenceId sequence) const = 0;

  virtual CacheSnapshot cache(SequenceId sequence, int layer) const = 0;
  virtual MemoryReport memory() const = 0;

  // The storage as the report's cache timeline draws it (engine/storage_map.h);
  // nullopt from engines that do not offer it (operations.storage_map false).
  virtual std::optional<StorageMap> storage_map() const { return std::nullopt; }

  // The one seam for transports (engine/pipeline.h): an engine in another
  // process returns the interface that sends steps without waiting; an
  // in-process engine returns null (the default) and the runner calls step.
  virtual Pipeline* pipeline() { return nullptr; }
};

}  // namespace kvcheck
