#include "engine/cpu/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvcheck::cpu {

KvCache::KvCache(int n_layers, int rows, int capacity, int n_kv_heads, int head_dim, KvDtype dtype)
    : n_layers_(n_layers),
      rows_(rows),
      capacity_(capacity),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      elem_bytes_(static_cast<size_t>(kv_dtype_bytes(dtype))) {
  const size_t total = size_t(n_layers) * rows * row_bytes();
  k_.resize(total);
  v_.resize(total);
  for (int r = 0; r < rows; ++r) clear_row(r);
}

void KvCache::clear_row(int row, int layers) {
  poison_slots(row, 0, capacity_, layers);
}

void KvCache::poison_slots(int row, int first, int end, int layers) {
#ifdef KVCHECK_POISON
  // A read of a slot that was never written must surface, not read zeros.
  if (first >= end) return;
  const size_t elems = size_t(end - first) * size_t(head_dim_);
  const int n = layers < 0 ? n_layers_ : std::min(layers, n_layers_);
  for (int l = 0; l < n; ++l) {
    for (int g = 0; g < n_kv_heads_; ++g) {
      for (std::vector<uint8_t>* block : {&k_, &v_}) {
        uint8_t* base = block->data() + offset(l, row, g, first);
        if (dtype_ == KvDtype::kF32) {
          const float nan = std::numeric_limits<float>::quiet_NaN();
          for (size_t i = 0; i < elems; ++i) std::memcpy(base + 4 * i, &nan, 4);
        } else {
          const uint16_t nan = poison_bits16(dtype_);
          for (size_t i = 0; i < elems; ++i) std::memcpy(base + 2 * i, &nan, 2);
        }
      }
    }
  }
#else
  (void)row, (void)first, (void)end, (void)layers;
#endif
}

bool KvCache::poisoned(bool key, int layer, int row, int kv_head, int slot, int d) const {
  const uint8_t* at =
      (key ? k(layer, row, kv_head, slot) : v(layer, row, kv_head, slot)) + size_t(d) * elem_bytes_;
  if (dtype_ == KvDtype::kF32) {
    float f;
    std::memcpy(&f, at, 4);
    return std::isnan(f);
  }
  uint16_t h;
  std::memcpy(&h, at, 2);
  return std::isnan(dtype_ == KvDtype::kBF16 ? bf16_to_float(h) : f16_to_float(h));
}

void KvCache::copy_slots(int from, int to, int n) {
  if (from == to || n <= 0) return;
  const size_t bytes = size_t(n) * size_t(head_dim_) * elem_bytes_;
  for (int l = 0; l < n_layers_; ++l) {
    for (int g = 0; g < n_kv_heads_; ++g) {
      std::memcpy(k(l, to, g, 0), k(l, from, g, 0), bytes);
      std::memcpy(v(l, to, g, 0), v(l, from, g, 0), bytes);
    }
  }
}

void KvCache::copy_row(int from, int to) {
  if (from == to) return;
  for (int l = 0; l < n_layers_; ++l) {
    std::memmove(k_.data() + offset(l, to, 0, 0), k_.data() + offset(l, from, 0, 0), row_bytes());
    std::memmove(v_.data() + offset(l, to, 0, 0), v_.data() + offset(l, from, 0, 0), row_bytes());
  }
}

}  // namespace kvcheck::cpu
