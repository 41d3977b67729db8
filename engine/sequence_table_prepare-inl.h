// A paged step's preparation before its writes: prefix-cache hits, copy on
// write of shared blocks, new blocks, and the one capacity check that lets
// a refused step change nothing. Apart because it is the one place where
// these interact. Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <map>
#include <string>

#include "engine/sequence_table.h"

namespace kvcheck {

// The fault prefix_hash_only keys the prefix index on this many bits of the
// chained hash and compares nothing else. Few enough that the generators'
// scenarios (a handful of registered blocks each) collide: at 8 bits a
// lookup collides with probability ~R/256 and the kill matrix's 100 cases
// did not meet one; at 4 bits it is ~R/16 (docs/FAULTS.md).
constexpr int kFaultyHashBits = 4;

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
  // Blocks offloaded to the host tier come back first, one device block each.
  const size_t reloads = host_blocks_of(batch).size();
  size_t needed = 0, evictable = 0;
  const auto count = [&] {
    needed = reloads;
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
    const std::string message =
        "step: the pool has " + std::to_string(free_.size()) + " free and " +
        std::to_string(evictable) + " evictable cached blocks of " + std::to_string(pool_blocks_) +
        "; this step needs " + std::to_string(needed) +
        (reloads > 0 ? " (" + std::to_string(reloads) + " to bring back from the host tier)"
                     : std::string());
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
  bring_back(batch, poison, copy);
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

}  // namespace kvcheck
