#include "engine/cpu/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace kvcheck::cpu {

KvCache::KvCache(int n_layers, int rows, int capacity, int n_kv_heads, int head_dim, KvDtype dtype,
                 std::vector<int> layer_slots)
    : n_layers_(n_layers),
      rows_(rows),
      capacity_(capacity),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      slot_bytes_(kv_row_bytes(dtype, size_t(head_dim))),
      slots_(layer_slots.empty() ? std::vector<int>(size_t(n_layers), capacity)
                                 : std::move(layer_slots)) {
  size_t total = 0;
  for (int l = 0; l < n_layers; ++l) {
    layer_offset_.push_back(total);
    total += size_t(rows) * row_bytes(l);
  }
  k_.resize(total);
  v_.resize(total);
  for (int r = 0; r < rows; ++r) clear_row(r);
}

bool KvCache::uneven() const {
  for (int s : slots_) {
    if (s != capacity_) return true;
  }
  return false;
}

void KvCache::clear_row(int row, int layers) {
  poison_slots(row, 0, capacity_, layers);
}

void KvCache::poison_slots(int row, int first, int end, int layers) {
#ifdef KVCHECK_POISON
  // A read of a slot that was never written must surface, not read zeros.
  if (first >= end) return;
  const int n = layers < 0 ? n_layers_ : std::min(layers, n_layers_);
  for (int l = 0; l < n; ++l) {
    // A ring holds fewer slots: the ones past it do not exist.
    const int layer_end = std::min(end, slots_[size_t(l)]);
    if (first >= layer_end) continue;
    for (int g = 0; g < n_kv_heads_; ++g) {
      for (std::vector<uint8_t>* block : {&k_, &v_}) {
        uint8_t* base = block->data() + offset(l, row, g, first);
        for (int s = first; s < layer_end; ++s, base += slot_bytes_) {
          kv_poison_row(base, dtype_, size_t(head_dim_));
        }
      }
    }
  }
#else
  (void)row, (void)first, (void)end, (void)layers;
#endif
}

bool KvCache::poisoned(bool key, int layer, int row, int kv_head, int slot, int d) const {
  const uint8_t* at = key ? k(layer, row, kv_head, slot) : v(layer, row, kv_head, slot);
  return std::isnan(kv_load(at, dtype_, size_t(head_dim_), size_t(d)));
}

void KvCache::copy_slots(int from, int to, int n) {
  if (from == to || n <= 0) return;
  for (int l = 0; l < n_layers_; ++l) {
    const size_t bytes = size_t(std::min(n, slots_[size_t(l)])) * slot_bytes_;
    for (int g = 0; g < n_kv_heads_; ++g) {
      std::memcpy(k(l, to, g, 0), k(l, from, g, 0), bytes);
      std::memcpy(v(l, to, g, 0), v(l, from, g, 0), bytes);
    }
  }
}

void KvCache::move_slots(int row, int from, int to, int n) {
  n = std::min(n, capacity_ - std::max(from, to));
  if (from == to || n <= 0) return;
  const size_t bytes = size_t(n) * slot_bytes_;
  for (int l = 0; l < n_layers_; ++l) {
    for (int g = 0; g < n_kv_heads_; ++g) {
      std::memmove(k(l, row, g, to), k(l, row, g, from), bytes);
      std::memmove(v(l, row, g, to), v(l, row, g, from), bytes);
    }
  }
}

std::vector<uint8_t> KvCache::read_slots(int row, int first, int end) const {
  std::vector<uint8_t> out;  // [layer][K, V][kv_head][slot][slot_bytes_]
  if (end <= first) return out;
  const size_t bytes = size_t(end - first) * slot_bytes_;
  for (int l = 0; l < n_layers_; ++l) {
    for (const std::vector<uint8_t>* kv : {&k_, &v_}) {
      for (int g = 0; g < n_kv_heads_; ++g) {
        const uint8_t* at = kv->data() + offset(l, row, g, first);
        out.insert(out.end(), at, at + bytes);
      }
    }
  }
  return out;
}

void KvCache::write_slots(int row, int first, std::span<const uint8_t> bytes) {
  const size_t per_head = bytes.size() / (size_t(n_layers_) * 2 * size_t(n_kv_heads_));
  const uint8_t* from = bytes.data();
  for (int l = 0; l < n_layers_; ++l) {
    for (std::vector<uint8_t>* kv : {&k_, &v_}) {
      for (int g = 0; g < n_kv_heads_; ++g, from += per_head) {
        if (per_head > 0) std::memcpy(kv->data() + offset(l, row, g, first), from, per_head);
      }
    }
  }
}

void KvCache::copy_row(int from, int to) {
  if (from == to) return;
  for (int l = 0; l < n_layers_; ++l) {
    std::memmove(k_.data() + offset(l, to, 0, 0), k_.data() + offset(l, from, 0, 0), row_bytes(l));
    std::memmove(v_.data() + offset(l, to, 0, 0), v_.data() + offset(l, from, 0, 0), row_bytes(l));
  }
}

}  // namespace kvcheck::cpu
