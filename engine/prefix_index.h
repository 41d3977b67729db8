// The prefix cache's index (docs/OPERATIONS.md, "Prefix cache"): which pool
// blocks hold which tokens, so that a new sequence whose prompt starts with
// tokens already cached reuses those blocks instead of recomputing them.
// Only full blocks are registered. A block's key is a chained hash of the
// tokens of every block up to and including it; a match compares the tokens
// and the chain link (the block before it), never the hash alone. The index
// knows nothing of reference counts: the sequence table decides when a
// registered block is merely cached (no table holds it) and evicts it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvcheck {

class PrefixIndex {
 public:
  PrefixIndex() = default;
  PrefixIndex(int pool_blocks, int block_size);

  bool registered(int block) const { return entries_[size_t(block)].registered; }

  // The longest run of registered blocks whose tokens are the leading
  // max_blocks * B tokens of `tokens` (or fewer), each chained to the one
  // before, in chains of the same cache key (a cache salt or adapter id; 0:
  // none): requests with different keys never share. hash_bits < 64 is the
  // fault prefix_hash_only: a block matches when the top hash_bits of its
  // key agree, with no token, link or cache key check.
  std::vector<int> match(std::span<const int32_t> tokens, int max_blocks, int hash_bits,
                         uint64_t cache_key = 0) const;

  // A registered block that continues `block`'s chain, or -1 (the fault
  // prefix_hit_one_block_too_many reads it).
  int child_of(int block) const;

  // Registers `block` as holding `tokens` (B of them) after `parent` (-1:
  // the first block of a prompt). False, changing nothing, when an equal
  // chain is registered already (that block is the one a hit reuses).
  bool add(int block, int parent, std::span<const int32_t> tokens, uint64_t cache_key = 0);

  // Forgets `block`; every block registered after it in a chain is
  // forgotten too (no prompt can reach them any more) and appended to
  // `dropped`.
  void remove(int block, std::vector<int>& dropped);

  // Least recently used order: a block is touched when it is registered,
  // reused by a hit, or released by its last holder.
  void touch(int block) { entries_[size_t(block)].last_use = ++clock_; }
  uint64_t last_use(int block) const { return entries_[size_t(block)].last_use; }

  size_t size() const { return by_key_.size(); }
  uint64_t bytes() const;

 private:
  struct Entry {
    bool registered = false;
    int parent = -1;              // the block before it in its chain, -1 for a first block
    uint64_t key = 0;             // chained hash of the chain's tokens through this block
    uint64_t cache_key = 0;       // the chain's cache key (0: none)
    std::vector<int32_t> tokens;  // [B] the tokens it holds
    uint64_t last_use = 0;
  };
  uint64_t key_after(int parent, std::span<const int32_t> tokens, uint64_t cache_key) const;
  int find(int parent, uint64_t key, std::span<const int32_t> tokens, int hash_bits,
           uint64_t cache_key) const;

  int block_size_ = 0;
  std::vector<Entry> entries_;                     // [block]
  std::unordered_multimap<uint64_t, int> by_key_;  // key -> registered block
  uint64_t clock_ = 0;
};

}  // namespace kvcheck
