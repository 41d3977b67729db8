#include "engine/engine.h"

#include <cstring>

namespace kvcheck {

namespace {

float widen(const std::vector<uint8_t>& bytes, KvDtype dtype, size_t index) {
  if (dtype == KvDtype::kF32) {
    float f;
    std::memcpy(&f, bytes.data() + index * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + index * 2, 2);
  return dtype == KvDtype::kBF16 ? bf16_to_float(h) : f16_to_float(h);
}

}  // namespace

float CacheSnapshot::k_at(int pos, int kv_head, int d) const {
  return widen(k, dtype, (size_t(pos) * n_kv_heads + kv_head) * head_dim + d);
}

float CacheSnapshot::v_at(int pos, int kv_head, int d) const {
  return widen(v, dtype, (size_t(pos) * n_kv_heads + kv_head) * head_dim + d);
}

SequenceId Engine::fork(SequenceId, int) {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "fork: not supported by " + name() + " (traits.operations.fork is false)");
}

void Engine::truncate(SequenceId, int) {
  throw EngineError(EngineError::Kind::kBadBatch, "truncate: not supported by " + name() +
                                                      " (traits.operations.truncate is false)");
}

PoolReport Engine::pool() const {
  throw EngineError(EngineError::Kind::kBadBatch, "pool: not supported by " + name() +
                                                      " (traits.operations.pool_report is false)");
}

std::string Engine::unheld_storage_check() const {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "unheld_storage_check: not supported by " + name() +
                        " (traits.operations.storage_check is false)");
}

int Engine::reused(SequenceId) const {
  return 0;
}

void Engine::flush_prefix_cache() {
  throw EngineError(EngineError::Kind::kBadBatch, "flush_prefix_cache: not supported by " + name() +
                                                      " (traits.operations.prefix_cache is false)");
}

}  // namespace kvcheck
