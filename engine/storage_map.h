// A picture of an engine's KV storage at one moment, for the report's cache
// timeline: which sequences point at each storage unit (a row of slots in a
// contiguous cache, a block of a paged pool), and per slot whether it holds data, the poison that
// marks it unwritten, or a mix of both. Engines that offer it declare
// operations.storage_map. No property reads it: it describes a layout, and a
// correct engine may lay out its storage however it likes; the report uses
// it to show where a faulty engine wrote and who shared what.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_dtype.h"

namespace kvcheck {

using SequenceId = int64_t;

enum class SlotState : uint8_t {
  kPoisoned,  // every K and V element of the slot, in every layer and head, is NaN
  kWritten,   // none is
  kMixed,     // some are: a write that reached only some layers or heads
};

struct StorageMap {
  std::string unit = "row";                      // what one unit of storage is: "row" or "block"
  int units = 0;                                 // U
  int slots_per_unit = 0;                        // S
  std::vector<std::vector<SequenceId>> holders;  // [U] sequences whose table points at it
  std::vector<int> held_slots;                   // [U] leading slots some holder's length covers
  std::vector<SlotState> state;                  // [U][S]
  std::vector<uint64_t> digest;                  // [U][S] FNV-1a of the slot's K and V bytes

  SlotState at(int unit, int slot) const {
    return state[size_t(unit) * size_t(slots_per_unit) + size_t(slot)];
  }
  uint64_t digest_at(int unit, int slot) const {
    return digest[size_t(unit) * size_t(slots_per_unit) + size_t(slot)];
  }
};

// The states and digests of storage laid out [layer][unit][kv_head][slot][dim]
// of `dtype` (the CPU and CUDA engines' layout); holders and held_slots are
// left empty.
StorageMap scan_storage(std::span<const uint8_t> k, std::span<const uint8_t> v, int layers,
                        int units, int kv_heads, int slots, int head_dim, KvDtype dtype);

}  // namespace kvcheck
