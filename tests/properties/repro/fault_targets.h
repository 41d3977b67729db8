// For each fault of the catalogue: the property its shrink target in
// docs/FAULTS.md is stated for, and that target size. The shrink tests, the
// bloated-case maker and docs/CASE_FORMAT.md's shrink table use this list.
#pragma once

#include <vector>

#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/kill_matrix.h"

namespace kvcheck::test {

struct FaultTarget {
  Fault fault;
  Property property;
  int shrink_target;  // docs/FAULTS.md, last column
};

// The property each fault's shrink target is stated for; the sizes come from
// the one catalogue (properties/rc/kill_matrix.h, docs/FAULTS.md).
inline const std::vector<FaultTarget>& fault_targets() {
  using P = Property;
  static const std::vector<FaultTarget> targets = [] {
    const Property property_of[] = {
        P::kCacheState,  // shared_layer_cache
        P::kCacheState,  // shared_rows
        P::kChunking,    // decode_position_zero
        P::kChunking,    // chunk_position_restart
        P::kChunking,    // position_lag_after_first
        P::kCacheState,  // position_bump_per_layer
        P::kGqa,         // tiled_kv_heads
        P::kReset,       // reset_keeps_kv
        P::kCacheState,  // reset_keeps_position
        P::kChunking,    // mask_top_left
        P::kChunking,    // append_overwrites
        P::kCacheState,  // compaction_table_only
        P::kChunking,    // rope_reapplied
        P::kCacheState,  // kv_swapped
        P::kCapacity,    // capacity_wraps
        P::kOracle,      // truncate_noop
        P::kOracle,      // truncate_keeps_position
        P::kPoison,      // reset_clears_layer0_only
        P::kSharing,     // cow_skipped
        P::kPool,        // fork_shares_partial_block
        P::kPool,        // freed_block_still_referenced
        P::kPool,        // refcount_leak
        P::kOracle,      // block_aliasing
        P::kCacheState,  // kv_scale_dropped
        P::kCacheState,  // kv_scale_per_tensor
        P::kCacheState,  // kv_scale_shared_kv
        P::kCacheState,  // prefix_hash_only
        P::kCacheState,  // prefix_hit_extra_block
        P::kPool,        // refusal_leaves_half_table
        P::kOracle,      // window_off_by_one
        P::kOracle,      // window_per_chunk
        P::kCacheState,  // ring_index_unwrapped
        P::kCacheState,  // shift_keeps_k
        P::kCacheState,  // shift_rotates_v
        P::kCacheState,  // shift_wrong_sign
        P::kPoison,      // truncate_late
        P::kCacheState,  // truncate_all_noop
        P::kCacheState,  // truncate_keeps_last
        P::kPool,        // abort_frees_cached
        P::kPrefix,      // prefix_ignores_key
        P::kOracle,      // hit_prompt_logits_stale
        P::kCacheState,  // offload_before_write
        P::kPool,        // offload_counts_drift
        P::kCacheState,  // restore_keeps_tail
    };
    static_assert(std::size(property_of) == size_t(kFaultCount));
    std::vector<FaultTarget> out;
    for (const rcgen::CatalogueEntry& e : rcgen::fault_catalogue()) {
      out.push_back({e.fault, property_of[size_t(e.fault)], e.shrink_target});
    }
    return out;
  }();
  return targets;
}

}  // namespace kvcheck::test
