#include "model/kv_memory.h"

#include <algorithm>

namespace kvcheck {

namespace {

struct DtypeInfo {
  SizingDtype dtype;
  const char* name;
  int element_bytes;  // int8: the codes only; its scales come on top
};

constexpr DtypeInfo kDtypes[] = {{SizingDtype::kF32, "f32", 4},
                                 {SizingDtype::kBF16, "bf16", 2},
                                 {SizingDtype::kF16, "f16", 2},
                                 {SizingDtype::kInt8, "int8", 1}};

const DtypeInfo& info(SizingDtype t) {
  return kDtypes[static_cast<size_t>(t)];
}

uint64_t checked_mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw InputError("KV cache size does not fit in 64 bits (" + std::to_string(a) + " x " +
                     std::to_string(b) + " bytes)");
  }
  return out;
}

}  // namespace

const char* sizing_dtype_name(SizingDtype t) {
  return info(t).name;
}

Result<SizingDtype> parse_sizing_dtype(std::string_view name) {
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return d.dtype;
  }
  return Result<SizingDtype>::failure("dtype: unknown \"" + std::string(name) +
                                      "\"; expected f32, bf16, f16 or int8");
}

const std::vector<SizingDtype>& all_sizing_dtypes() {
  static const std::vector<SizingDtype> all = {SizingDtype::kF32, SizingDtype::kBF16,
                                               SizingDtype::kF16, SizingDtype::kInt8};
  return all;
}

std::string KvShape::validate() const {
  const auto positive = [](const char* field, int value) {
    return value > 0
               ? std::string()
               : std::string(field) + ": expected a positive integer, got " + std::to_string(value);
  };
  for (const std::string& e : {positive("n_layers", n_layers), positive("n_heads", n_heads),
                               positive("n_kv_heads", n_kv_heads), positive("head_dim", head_dim),
                               positive("max_context", max_context)}) {
    if (!e.empty()) return e;
  }
  if (n_heads % n_kv_heads != 0) {
    return "n_kv_heads: " + std::to_string(n_kv_heads) + " does not divide n_heads " +
           std::to_string(n_heads);
  }
  if (window < 0)
    return "window: expected 0 (none) or a positive integer, got " + std::to_string(window);
  return {};
}

uint64_t head_vector_bytes(int head_dim, SizingDtype dtype) {
  const uint64_t d = uint64_t(head_dim);
  const uint64_t codes = d * uint64_t(info(dtype).element_bytes);
  if (dtype != SizingDtype::kInt8) return codes;
  const uint64_t blocks = (d + kInt8BlockElements - 1) / kInt8BlockElements;
  return codes + blocks * kInt8ScaleBytes;
}

uint64_t kv_bytes_per_token(const KvShape& shape, SizingDtype dtype) {
  // K and V, in every layer, for every KV head.
  const uint64_t vectors = checked_mul(2 * uint64_t(shape.n_layers), uint64_t(shape.n_kv_heads));
  return checked_mul(vectors, head_vector_bytes(shape.head_dim, dtype));
}

uint64_t cached_tokens(const KvShape& shape, uint64_t context) {
  return shape.window > 0 ? std::min(context, uint64_t(shape.window)) : context;
}

uint64_t kv_bytes(const KvShape& shape, SizingDtype dtype, uint64_t tokens, uint64_t batch) {
  return checked_mul(checked_mul(kv_bytes_per_token(shape, dtype), tokens), batch);
}

}  // namespace kvcheck
