// Named fault switches of the engine: each reproduces a real KV-cache bug seen
// in a public inference engine (docs/FAULTS.md cites them). They exist so the
// kill matrix can prove that the properties catch each bug. All are off by
// default; when off, each costs one predictable branch on a per-call value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/status.h"

namespace kvcheck {

enum class Fault : uint8_t {
  kSharedLayerCache,       // every layer reads and writes layer 0's K/V
  kSharedRows,             // every sequence uses cache row 0
  kDecodePositionZero,     // a 1-token chunk gets position 0 for RoPE / wpe
  kChunkPositionRestart,   // each chunk's positions restart at 0 (cache slots right)
  kPositionLagAfterFirst,  // after the first chunk, slots and positions are one ahead
  kPositionBumpPerLayer,   // layers >= 1 see the counter already advanced by the chunk
  kTiledKvHeads,           // query head h reads KV head h % n_kv_heads
  kResetKeepsKv,           // reset leaves rows' K/V in place as a visible prefix
  kResetKeepsPosition,     // reset leaves rows' position counters in place
  kMaskTopLeft,            // chunk query i sees keys 0..i instead of 0..p+i
  kAppendOverwrites,       // each chunk replaces the cached K/V instead of extending it
  kCompactionTableOnly,    // finish moves the row table but not the K/V data
  kRopeReapplied,          // cached keys are rotated again on every later step
  kKvSwapped,              // K is written to V's storage and V to K's
  kCapacityWraps,          // past capacity, slots wrap to 0 instead of failing
  // The operations of docs/OPERATIONS.md (fork, truncate, paged storage).
  kTruncateNoop,               // truncate changes nothing
  kTruncateKeepsPosition,      // truncate rewinds the slots but not the position counter
  kResetClearsLayer0Only,      // reset re-poisons layer 0 only; other layers keep old K/V
  kCowSkipped,                 // a write into a shared block goes in place, no copy
  kForkSharesPartialBlock,     // fork hands the partial last block over without a reference
  kFreedBlockStillReferenced,  // finish frees its blocks even where a fork still holds them
  kRefcountLeak,               // finish never drops the references of shared blocks
  kBlockAliasing,              // blocks 2i and 2i+1 share one block of storage
  // Quantized K/V (q8_0): the per-block scales.
  kKvScaleDropped,    // every scale is taken as 1.0 (codes round(x), clamped)
  kKvScalePerTensor,  // one scale for the token's whole K (and V), not one per block
  kKvScaleSharedKv,   // V is quantized with K's block scales
  // The prefix cache and small pools.
  kPrefixHashOnly,          // a prefix match on an 8-bit hash, tokens never compared
  kPrefixHitExtraBlock,     // a one-block hit also takes the next cached block and writes into it
  kRefusalLeavesHalfTable,  // a refused step keeps the blocks it took before running dry
  // Sliding windows (docs/OPERATIONS.md, "Sliding windows").
  kWindowOffByOne,      // once the window is full, its oldest key (p - W + 1) is dropped too
  kWindowPerChunk,      // a chunk's rows all start their window at the chunk's first row's
  kRingIndexUnwrapped,  // a chunk's ring slots run on from its first slot without wrapping
  // Context shift (erase and shift, RoPE models).
  kShiftKeepsK,     // shift moves the positions but does not re-rotate the keys
  kShiftRotatesV,   // shift re-rotates the values as well as the keys
  kShiftWrongSign,  // shift re-rotates the keys by -delta
  // Speculative decoding's rollback (verify: truncate of rejected drafts).
  kTruncateLate,       // the rolled-back tail stays visible to the next step
  kTruncateAllNoop,    // a rollback of every cached token changes nothing
  kTruncateKeepsLast,  // a rollback of n tokens keeps the last of them
  // Aborted prefills (abort).
  kAbortFreesCached,  // abort frees its cached blocks but leaves them in the prefix index
  // Cache keys (a cache salt, an adapter id).
  kPrefixIgnoresKey,      // prefix blocks are shared across cache keys
  kHitPromptLogitsStale,  // a hit's reused prompt rows keep the buffer's old logits
  // A second memory tier (offload).
  kOffloadBeforeWrite,  // the host copy misses the sequence's last step's writes
  kOffloadCountsDrift,  // a reload leaves the host block off the host free list
  // Sequence state save and restore.
  kRestoreKeepsTail,  // a restore keeps the cells held past the saved ones
  kCount
};

constexpr int kFaultCount = static_cast<int>(Fault::kCount);

// Stable names, used by the CLI, case files and KVCHECK_FAULT.
std::string_view fault_name(Fault f);
std::optional<Fault> parse_fault(std::string_view name);
// One line: what the fault does and the public bug it models.
std::string_view fault_summary(Fault f);
// The operation the fault lives in, as named in OperationTraits ("truncate",
// "paged": paged storage with fork, "storage_check", "sliding_window"), the
// K/V dtype it needs ("q8_0"), or "" for the core calls. An engine without it cannot show the
// fault (kill matrix: skipped).
std::string_view fault_needs(Fault f);

// Room for 128 switches: the operation issues add about 20 to today's 15.
class FaultSet {
 public:
  static constexpr int kCapacity = 128;
  static_assert(kFaultCount <= kCapacity);

  constexpr FaultSet() = default;
  constexpr explicit FaultSet(Fault f) { set(f); }
  constexpr bool has(Fault f) const {
    const int i = static_cast<int>(f);
    return (words_[size_t(i / 64)] >> (i % 64)) & 1u;
  }
  constexpr bool any() const { return (words_[0] | words_[1]) != 0; }
  constexpr FaultSet with(Fault f) const {
    FaultSet s = *this;
    s.set(f);
    return s;
  }
  constexpr bool operator==(const FaultSet&) const = default;
  std::string to_string() const;  // comma-separated names, "none" when empty

 private:
  constexpr void set(Fault f) {
    const int i = static_cast<int>(f);
    words_[size_t(i / 64)] |= uint64_t{1} << (i % 64);
  }
  std::array<uint64_t, 2> words_{};
};

// "none", or fault names separated by commas (the form the CLI, case files
// and KVCHECK_FAULT use). The error names the offending name and lists the
// known ones.
Result<FaultSet> parse_fault_list(std::string_view text);

}  // namespace kvcheck
