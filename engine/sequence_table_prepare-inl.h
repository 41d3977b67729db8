// A paged step's preparation before its writes: prefix-cache hits, copy on
// write of shared blocks, new blocks, and the one capacity check that lets
// a refused step change nothing. Apart because it is the one place where
// these interact. Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "engine/sequence_table.h"

namespace kvcheck {

// The fault prefix_hash_only keys the prefix index on this many bits of the
// chained hash and compares nothing else. Few enough that the generators'
// scenarios (a handful of registered blocks each) collide: at 8 bits a
// lookup collides with probability ~R/256 and the kill matrix's 100 cases
// did not meet one; at 4 bits it is ~R/16 (docs/FAULTS.md).
constexpr int kFaultyHashBits = 4;

// Prefix hits, found before anything changes: the longest run of whole
// cached blocks matching the chunk's leading tokens. The hit reuses at most
// n - 1 tokens of them, so that the last token's logits are computed: when
// the whole chunk is cached, the last block is shared and copied before the
// last token is written into it (it is registered, so never written).
template <bool kFaults>
typename BasicSequenceTable<kFaults>::StepHits BasicSequenceTable<kFaults>::find_prefix_hits(
    std::span<const BatchEntry> batch) const {
  StepHits h{std::vector<std::vector<int>>(batch.size()), std::vector<int>(batch.size(), 0),
             std::vector<bool>(batch.size(), false), std::vector<bool>(batch.size(), false),
             std::vector<bool>(size_t(pool_blocks_), false)};
  if (!prefix_cache_) return h;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceState& s = sequences_.at(batch[i].sequence);
    if (s.length != 0 || s.slot_base != 0) continue;
    const int n = static_cast<int>(batch[i].tokens.size());
    h.blocks[i] = index_.match(batch[i].tokens, n / block_size_,
                               has(Fault::kPrefixHashOnly) ? kFaultyHashBits : 64, index_key(s));
    // A one-token chunk reuses nothing (its token is the last one).
    if (n == 1) h.blocks[i].clear();
    const int covered = static_cast<int>(h.blocks[i].size()) * block_size_;
    h.matched[i] = std::min(covered, n - 1);
    h.partial[i] = h.matched[i] < covered;
    // Fault: a one-block hit also takes the block chained after it.
    if (has(Fault::kPrefixHitExtraBlock) && h.blocks[i].size() == 1 && n > block_size_) {
      if (const int next = index_.child_of(h.blocks[i][0]); next >= 0) {
        h.blocks[i].push_back(next);
        h.extra[i] = true;
      }
    }
    for (const int b : h.blocks[i]) h.in_hit[size_t(b)] = true;
  }
  return h;
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::cow_block(const SequenceState& s) const {
  const int first = s.slot_base + s.length;
  const size_t index = size_t(first / block_size_);
  if (first >= capacity_ || index >= s.blocks.size()) return -1;
  const int block = s.blocks[index];
  const bool shared = refcount_[size_t(block)] > 1 || (prefix_cache_ && index_.registered(block));
  return shared && !has(Fault::kCowSkipped) ? block : -1;
}

template <bool kFaults>
int BasicSequenceTable<kFaults>::blocks_needed(const SequenceState& s, int more,
                                               size_t held) const {
  const int end = std::min(s.slot_base + s.length + more, capacity_);
  return std::max(0, blocks_for(end) - static_cast<int>(held));
}

// Entries copy in batch order, each dropping a reference to the shared
// block: the last writer of a block shared within the batch copies nothing
// (unless it is registered: registered contents never change).
template <bool kFaults>
std::pair<size_t, size_t> BasicSequenceTable<kFaults>::step_demand(
    std::span<const BatchEntry> batch, const StepHits& hits, size_t reloads) const {
  size_t needed = reloads;
  std::map<int, int> references;  // [shared block] references left while counting
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceState& s = sequences_.at(batch[i].sequence);
    const int chunk = static_cast<int>(batch[i].tokens.size());
    needed += size_t(blocks_needed(s, chunk, std::max(s.blocks.size(), hits.blocks[i].size())));
    if (!hits.blocks[i].empty()) {
      needed += hits.partial[i];  // the copy of the last hit block
      continue;
    }
    if (const int shared = cow_block(s); shared >= 0) {
      auto [it, fresh] = references.try_emplace(shared, refcount_[size_t(shared)]);
      if (it->second > 1 || (prefix_cache_ && index_.registered(shared))) ++needed;
      --it->second;
    }
  }
  // Cached blocks a hit takes cannot be evicted to make room.
  size_t evictable = 0;
  for (int b = 0; b < pool_blocks_; ++b) {
    evictable += prefix_cache_ && cached(b) && !hits.in_hit[size_t(b)];
  }
  return {needed, evictable};
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::refuse_step(std::span<const BatchEntry> batch, size_t needed,
                                              size_t evictable, size_t reloads,
                                              const PoisonSlots& poison) {
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
      const int chunk = static_cast<int>(batch[i].tokens.size());
      for (int k = blocks_needed(s, chunk, s.blocks.size()); k > 0 && !free_.empty(); --k) {
        s.blocks.push_back(allocate_block(poison));
      }
    }
  }
  throw EngineError(EngineError::Kind::kCapacity, message);
}

// Every hit takes its blocks before any allocation can evict one.
template <bool kFaults>
void BasicSequenceTable<kFaults>::take_hits(std::span<const BatchEntry> batch, const StepHits& hits,
                                            std::vector<int>& reused) {
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = sequences_.at(batch[i].sequence);
    s.reused = reused[i] = hits.matched[i];
    if (hits.blocks[i].empty()) continue;
    for (const int b : hits.blocks[i]) {
      ++refcount_[size_t(b)];
      index_.touch(b);
    }
    s.blocks = hits.blocks[i];
    s.tokens.assign(batch[i].tokens.begin(), batch[i].tokens.begin() + hits.matched[i]);
    s.length = hits.matched[i];
  }
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::allocate_step_blocks(std::span<const BatchEntry> batch,
                                                       const StepHits& hits, const CopySlots& copy,
                                                       const PoisonSlots& poison) {
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = sequences_.at(batch[i].sequence);
    const int k = hits.matched[i];
    // The fault's extra block is written in place: it skips the copy.
    if (const int shared = hits.extra[i] ? -1 : cow_block(s); shared >= 0) {
      const int own = allocate_block(poison);
      copy(storage_block(shared), storage_block(own), (s.slot_base + s.length) % block_size_);
      s.blocks[size_t((s.slot_base + s.length) / block_size_)] = own;
      release(shared, poison);  // others still hold it; what only this one used is poisoned
    }
    const int chunk = static_cast<int>(batch[i].tokens.size());
    for (int more = blocks_needed(s, chunk - k, s.blocks.size()); more > 0; --more) {
      s.blocks.push_back(allocate_block(poison));
    }
  }
}

template <bool kFaults>
std::vector<int> BasicSequenceTable<kFaults>::prepare_step(std::span<const BatchEntry> batch,
                                                           const CopySlots& copy,
                                                           const PoisonSlots& poison) {
  std::vector<int> reused(batch.size(), 0);  // [entry] tokens taken from the prefix cache
  if (!paged()) return reused;
  StepHits hits = find_prefix_hits(batch);
  // Blocks offloaded to the host tier come back first, one device block each.
  const size_t reloads = host_blocks_of(batch).size();
  auto [needed, evictable] = step_demand(batch, hits, reloads);
  if (needed > free_.size() + evictable &&
      std::find(hits.partial.begin(), hits.partial.end(), true) != hits.partial.end()) {
    // The copy of a fully cached chunk's last block is the one block a hit
    // may need beyond the sequence's share: without room for it, the hit
    // stops a block earlier (so the default pool never runs dry).
    std::fill(hits.in_hit.begin(), hits.in_hit.end(), false);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (hits.partial[i]) hits.blocks[i].pop_back(), hits.partial[i] = false;
      hits.matched[i] =
          std::min<int>(hits.matched[i], static_cast<int>(hits.blocks[i].size()) * block_size_);
      for (const int b : hits.blocks[i]) hits.in_hit[size_t(b)] = true;
    }
    std::tie(needed, evictable) = step_demand(batch, hits, reloads);
  }
  if (needed > free_.size() + evictable) refuse_step(batch, needed, evictable, reloads, poison);
  take_hits(batch, hits, reused);
  bring_back(batch, poison, copy);
  allocate_step_blocks(batch, hits, copy, poison);
  return reused;
}

}  // namespace kvcheck
