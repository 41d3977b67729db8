// The second memory tier: offload moves a sequence's device blocks to host
// blocks and a step brings them back before it writes. Host blocks are
// numbered after the device pool's, so every other call (fork, truncate,
// finish, cache snapshots, the pool report) works on either tier unchanged;
// only attention needs the data in device memory. Apart from the pool
// because its faults (vLLM #45704, TensorRT-LLM PR #12834) live here.
// Included once, by sequence_table.cpp.
#pragma once

#include <algorithm>
#include <string>

#include "engine/sequence_table.h"

namespace kvcheck {

template <bool kFaults>
void BasicSequenceTable<kFaults>::retarget(int from, int to) {
  for (auto& [id, s] : sequences_) std::replace(s.blocks.begin(), s.blocks.end(), from, to);
  refcount_[size_t(to)] = refcount_[size_t(from)];
  refcount_[size_t(from)] = 0;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::offload(SequenceId id, const CopySlots& copy,
                                          const PoisonSlots& poison) {
  const SequenceState& s = lookup(id, "offload");
  const std::string who = "offload: sequence " + std::to_string(id);
  if (host_blocks_ == 0) {
    throw EngineError(EngineError::Kind::kBadBatch,
                      who + ": the engine has no host tier (EngineOptions::host_blocks is 0)");
  }
  std::vector<int> moving;  // [logical block] device blocks of its table, first occurrence
  std::vector<int> index;   // [moving] the logical block it holds
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int b = s.blocks[i];
    if (on_host(b) || std::find(moving.begin(), moving.end(), b) != moving.end()) continue;
    moving.push_back(b);
    index.push_back(int(i));
  }
  if (moving.size() > host_free_.size()) {
    throw EngineError(EngineError::Kind::kCapacity,
                      who + " holds " + std::to_string(moving.size()) +
                          " blocks in device memory; the host tier has " +
                          std::to_string(host_free_.size()) + " free of " +
                          std::to_string(host_blocks_) + " (host_blocks)");
  }
  // Fault: the copy does not wait for the last step, whose slots it misses.
  const int written = s.slot_base + s.length - (has(Fault::kOffloadBeforeWrite) ? s.last_fed : 0);
  for (size_t j = 0; j < moving.size(); ++j) {
    const int b = moving[j];
    // The prefix cache indexes device blocks only: a registered one leaves it.
    if (prefix_cache_ && index_.registered(b)) evict(b, poison);
    const int host = host_free_.back();
    host_free_.pop_back();
    const int slots = has(Fault::kOffloadBeforeWrite)
                          ? std::clamp(written - index[j] * block_size_, 0, block_size_)
                          : block_size_;
    copy(storage_block(b), storage_block(host), slots);
    retarget(b, host);
    free_.push_back(b);
    poison(storage_block(b), 0, block_size_);
  }
}

template <bool kFaults>
std::vector<int> BasicSequenceTable<kFaults>::host_blocks_of(
    std::span<const BatchEntry> batch) const {
  std::vector<int> out;
  for (const BatchEntry& e : batch) {
    for (const int b : sequences_.at(e.sequence).blocks) {
      if (on_host(b) && std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    }
  }
  return out;
}

template <bool kFaults>
void BasicSequenceTable<kFaults>::bring_back(std::span<const BatchEntry> batch,
                                             const PoisonSlots& poison, const CopySlots& copy) {
  for (const int host : host_blocks_of(batch)) {
    const int device = allocate_block(poison);
    copy(storage_block(host), storage_block(device), block_size_);
    retarget(host, device);
    // Fault: the host block is never handed back, so the host tier's free
    // count drifts below what its tables leave.
    if (!has(Fault::kOffloadCountsDrift)) host_free_.push_back(host);
    poison(storage_block(host), 0, block_size_);
  }
}

}  // namespace kvcheck
