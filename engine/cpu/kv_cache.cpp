#include "engine/cpu/kv_cache.h"

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

void KvCache::clear_row(int row) {
#ifdef KVCHECK_POISON
  // A read of a slot that was never written must surface, not read zeros.
  const size_t elems = row_bytes() / elem_bytes_;
  for (int l = 0; l < n_layers_; ++l) {
    for (std::vector<uint8_t>* block : {&k_, &v_}) {
      uint8_t* base = block->data() + offset(l, row, 0, 0);
      if (dtype_ == KvDtype::kF32) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (size_t i = 0; i < elems; ++i) std::memcpy(base + 4 * i, &nan, 4);
      } else {
        const uint16_t nan = poison_bits16(dtype_);
        for (size_t i = 0; i < elems; ++i) std::memcpy(base + 2 * i, &nan, 2);
      }
    }
  }
#else
  (void)row;
#endif
}

void KvCache::copy_row(int from, int to) {
  if (from == to) return;
  for (int l = 0; l < n_layers_; ++l) {
    std::memmove(k_.data() + offset(l, to, 0, 0), k_.data() + offset(l, from, 0, 0), row_bytes());
    std::memmove(v_.data() + offset(l, to, 0, 0), v_.data() + offset(l, from, 0, 0), row_bytes());
  }
}

}  // namespace kvcheck::cpu
