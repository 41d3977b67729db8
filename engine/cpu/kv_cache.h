// The CPU engine's KV storage: one K and one V block per layer, each row a
// sequence's own slots. Slot s of a row holds the key/value at that row's
// s-th cached position. Heads are outermost within a row so that a decode
// over one KV head streams contiguous memory. Paged storage uses the same
// layout with a row per pool block and capacity = the block size. A layer
// may keep fewer slots per row than the capacity: a sliding-window layer's
// ring of W slots (docs/OPERATIONS.md, "Sliding windows").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_dtype.h"

namespace kvcheck::cpu {

class KvCache {
 public:
  // layer_slots: [n_layers] slots per row of each layer (empty: capacity for
  // every layer; each entry in [1, capacity]).
  KvCache(int n_layers, int rows, int capacity, int n_kv_heads, int head_dim, KvDtype dtype,
          std::vector<int> layer_slots = {});

  KvDtype dtype() const { return dtype_; }
  int capacity() const { return capacity_; }
  int rows() const { return rows_; }
  // Slots per row of `layer`: the capacity, or a windowed layer's ring.
  int slots(int layer) const { return slots_[size_t(layer)]; }
  // True when some layer keeps fewer slots than the capacity.
  bool uneven() const;

  // Start of slot `slot` of (layer, row, kv_head); slots of one head are
  // contiguous with stride kv_row_bytes(dtype, head_dim).
  uint8_t* k(int layer, int row, int kv_head, int slot) {
    return k_.data() + offset(layer, row, kv_head, slot);
  }
  uint8_t* v(int layer, int row, int kv_head, int slot) {
    return v_.data() + offset(layer, row, kv_head, slot);
  }
  const uint8_t* k(int layer, int row, int kv_head, int slot) const {
    return k_.data() + offset(layer, row, kv_head, slot);
  }
  const uint8_t* v(int layer, int row, int kv_head, int slot) const {
    return v_.data() + offset(layer, row, kv_head, slot);
  }

  // Marks every slot of a row unwritten (NaN when poisoning is compiled in)
  // in layers 0..layers-1 (all by default; fewer only for a fault).
  void clear_row(int row, int layers = -1);
  // Slots [first, end) of a row, in layers 0..layers-1 (all when -1).
  void poison_slots(int row, int first, int end, int layers = -1);
  // Copies every layer's K/V of row `from` into row `to`.
  void copy_row(int from, int to);
  // Copies slots [0, n) of every layer and head from row `from` to row `to`.
  void copy_slots(int from, int to, int n);
  // Within one row, every layer and head: slots [from, from + n) move to
  // [to, to + n) (overlap allowed; clipped to the capacity).
  void move_slots(int row, int from, int to, int n);
  // Slots [first, end) of a row, every layer and head, as bytes
  // ([layer][K, V][kv_head][slot][kv_row_bytes]): a saved sequence state.
  // write_slots puts what read_slots returned back at slot `first`.
  std::vector<uint8_t> read_slots(int row, int first, int end) const;
  void write_slots(int row, int first, std::span<const uint8_t> bytes);
  // True when the element at (layer, row, kv_head, slot, d) of K or V is the
  // poison (NaN) a clear writes.
  bool poisoned(bool key, int layer, int row, int kv_head, int slot, int d) const;
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }

  // The whole storage, [layer][row][kv_head][slot][kv_row_bytes] bytes.
  std::span<const uint8_t> k_bytes() const { return k_; }
  std::span<const uint8_t> v_bytes() const { return v_; }

  // Exactly 2 * rows * kv_heads * kv_row_bytes(dtype, head_dim) * (sum over
  // layers of their slots: capacity, or W for a windowed layer's ring);
  // kv_row_bytes is head_dim * sizeof(dtype), plus the scales for q8_0.
  uint64_t bytes() const { return k_.size() + v_.size(); }

 private:
  size_t offset(int layer, int row, int kv_head, int slot) const {
    const size_t slots = size_t(slots_[size_t(layer)]);
    return layer_offset_[size_t(layer)] +
           ((size_t(row) * n_kv_heads_ + kv_head) * slots + slot) * slot_bytes_;
  }
  size_t row_bytes(int layer) const {
    return size_t(n_kv_heads_) * size_t(slots_[size_t(layer)]) * slot_bytes_;
  }

  int n_layers_, rows_, capacity_, n_kv_heads_, head_dim_;
  KvDtype dtype_;
  size_t slot_bytes_;                 // kv_row_bytes(dtype, head_dim): one head's slot
  std::vector<int> slots_;            // [layer] slots per row
  std::vector<size_t> layer_offset_;  // [layer] byte offset of the layer's rows
  std::vector<uint8_t> k_;            // [layer][row][kv_head][slots(layer)][slot_bytes_]
  std::vector<uint8_t> v_;            // [layer][row][kv_head][slots(layer)][slot_bytes_]
};

}  // namespace kvcheck::cpu
