#include "engine/storage_map.h"

#include <cmath>
#include <cstring>

namespace kvcheck {

namespace {

// Folds one head's slot of K or V into the slot's digest and NaN count.
void scan_head(const uint8_t* p, size_t elems, KvDtype dtype, uint64_t& digest, size_t& nans) {
  for (size_t i = 0; i < elems; ++i) nans += std::isnan(kv_load(p, dtype, elems, i));
  for (size_t b = 0; b < kv_row_bytes(dtype, elems); ++b) {
    digest ^= p[b];
    digest *= 0x100000001B3ull;
  }
}

}  // namespace

StorageMap scan_storage(std::span<const uint8_t> k, std::span<const uint8_t> v, int layers,
                        int units, int kv_heads, int slots, int head_dim, KvDtype dtype) {
  StorageMap map;
  map.units = units;
  map.slots_per_unit = slots;
  map.holders.assign(size_t(units), {});
  const size_t cells = size_t(units) * size_t(slots);
  map.state.assign(cells, SlotState::kPoisoned);
  map.digest.assign(cells, 0xCBF29CE484222325ull);
  std::vector<size_t> nans(cells, 0);  // [U][S]
  const size_t D = size_t(head_dim), slot_bytes = kv_row_bytes(dtype, D);
  for (int l = 0; l < layers; ++l) {
    for (int u = 0; u < units; ++u) {
      for (int g = 0; g < kv_heads; ++g) {
        for (int s = 0; s < slots; ++s) {
          const size_t at =
              (((size_t(l) * size_t(units) + size_t(u)) * size_t(kv_heads) + size_t(g)) *
                   size_t(slots) +
               size_t(s)) *
              slot_bytes;
          const size_t cell = size_t(u) * size_t(slots) + size_t(s);
          scan_head(k.data() + at, D, dtype, map.digest[cell], nans[cell]);
          scan_head(v.data() + at, D, dtype, map.digest[cell], nans[cell]);
        }
      }
    }
  }
  const size_t per_slot = 2 * size_t(layers) * size_t(kv_heads) * D;
  for (size_t c = 0; c < cells; ++c) {
    map.state[c] = nans[c] == per_slot ? SlotState::kPoisoned
                   : nans[c] == 0      ? SlotState::kWritten
                                       : SlotState::kMixed;
  }
  return map;
}

}  // namespace kvcheck
