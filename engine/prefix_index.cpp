#include "engine/prefix_index.h"

#include <algorithm>
#include <string_view>

#include "model/rng.h"

namespace kvcheck {

PrefixIndex::PrefixIndex(int pool_blocks, int block_size)
    : block_size_(block_size), entries_(size_t(pool_blocks)) {}

uint64_t PrefixIndex::key_after(int parent, std::span<const int32_t> tokens,
                                uint64_t cache_key) const {
  // A chain's first block mixes in its cache key (unkeyed chains hash as before).
  uint64_t seed = parent < 0 ? kFnv1a64Basis : entries_[size_t(parent)].key;
  if (parent < 0 && cache_key != 0) {
    seed = fnv1a64(std::string_view(reinterpret_cast<const char*>(&cache_key), sizeof cache_key),
                   seed);
  }
  return fnv1a64(std::string_view(reinterpret_cast<const char*>(tokens.data()),
                                  tokens.size() * sizeof(int32_t)),
                 seed);
}

int PrefixIndex::find(int parent, uint64_t key, std::span<const int32_t> tokens, int hash_bits,
                      uint64_t cache_key) const {
  if (hash_bits < 64) {
    // Fault: a short hash and nothing else decides (openvino.genai #3722).
    // The top bits: FNV-1a's low byte is a bijection of the last input byte.
    const int shift = 64 - hash_bits;
    for (size_t b = 0; b < entries_.size(); ++b) {
      if (entries_[b].registered && entries_[b].key >> shift == key >> shift) return int(b);
    }
    return -1;
  }
  const auto [first, last] = by_key_.equal_range(key);
  for (auto it = first; it != last; ++it) {
    const Entry& e = entries_[size_t(it->second)];
    if (e.parent == parent && e.cache_key == cache_key &&
        std::equal(tokens.begin(), tokens.end(), e.tokens.begin())) {
      return it->second;
    }
  }
  return -1;
}

std::vector<int> PrefixIndex::match(std::span<const int32_t> tokens, int max_blocks, int hash_bits,
                                    uint64_t cache_key) const {
  std::vector<int> blocks;
  const size_t B = size_t(block_size_);
  int parent = -1;
  for (size_t j = 0; int(j) < max_blocks && (j + 1) * B <= tokens.size(); ++j) {
    const std::span<const int32_t> own = tokens.subspan(j * B, B);
    const int block = find(parent, key_after(parent, own, cache_key), own, hash_bits, cache_key);
    if (block < 0) break;
    blocks.push_back(block);
    parent = block;
  }
  return blocks;
}

int PrefixIndex::child_of(int block) const {
  for (size_t b = 0; b < entries_.size(); ++b) {
    if (entries_[b].registered && entries_[b].parent == block) return int(b);
  }
  return -1;
}

bool PrefixIndex::add(int block, int parent, std::span<const int32_t> tokens, uint64_t cache_key) {
  const uint64_t key = key_after(parent, tokens, cache_key);
  if (find(parent, key, tokens, 64, cache_key) >= 0) return false;
  Entry& e = entries_[size_t(block)];
  e.registered = true;
  e.parent = parent;
  e.key = key;
  e.cache_key = cache_key;
  e.tokens.assign(tokens.begin(), tokens.end());
  by_key_.emplace(key, block);
  touch(block);
  return true;
}

void PrefixIndex::remove(int block, std::vector<int>& dropped) {
  Entry& e = entries_[size_t(block)];
  if (!e.registered) return;
  const auto [first, last] = by_key_.equal_range(e.key);
  for (auto it = first; it != last; ++it) {
    if (it->second == block) {
      by_key_.erase(it);
      break;
    }
  }
  e.registered = false;
  e.parent = -1;
  e.tokens.clear();
  for (size_t b = 0; b < entries_.size(); ++b) {
    if (entries_[b].registered && entries_[b].parent == block) {
      dropped.push_back(int(b));
      remove(int(b), dropped);
    }
  }
}

uint64_t PrefixIndex::bytes() const {
  return entries_.size() * (sizeof(Entry) + size_t(block_size_) * sizeof(int32_t)) +
         by_key_.size() * (sizeof(uint64_t) + sizeof(int) + 2 * sizeof(void*));
}

}  // namespace kvcheck
