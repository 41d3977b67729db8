#include "engine/engine.h"

#include <cstring>
#include <stdexcept>

namespace kvcheck {

namespace {

// Element d of head row `row` ([length * KVH] rows of D elements); q8_0
// codes scale by their block's entry of `scales` ([rows][blocks]), the same
// float product the kernels compute.
float widen(const std::vector<uint8_t>& bytes, const std::vector<float>& scales, KvDtype dtype,
            size_t row, size_t dim, size_t d) {
  const size_t index = row * dim + d;
  switch (dtype) {
    case KvDtype::kF32: {
      float f;
      std::memcpy(&f, bytes.data() + index * 4, 4);
      return f;
    }
    case KvDtype::kBF16:
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + index * 2, 2);
      return dtype == KvDtype::kBF16 ? bf16_to_float(h) : f16_to_float(h);
    }
    case KvDtype::kQ8_0:
      return static_cast<float>(static_cast<int8_t>(bytes[index])) *
             scales[row * q8_blocks(dim) + d / kQ8Block];
    case KvDtype::kQ4_0:  // snapshots of q4_0, q5_0, q5_1 arrive widened to f32 (kv_dtype.h)
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      break;
  }
  return 0.0f;
}

}  // namespace

float CacheSnapshot::k_at(int pos, int kv_head, int d) const {
  return widen(k, k_scales, dtype, size_t(pos) * n_kv_heads + kv_head, head_dim, d);
}

float CacheSnapshot::v_at(int pos, int kv_head, int d) const {
  return widen(v, v_scales, dtype, size_t(pos) * n_kv_heads + kv_head, head_dim, d);
}

float CacheSnapshot::k_scale(int pos, int kv_head, int block) const {
  return k_scales[(size_t(pos) * n_kv_heads + kv_head) * q8_blocks(head_dim) + block];
}

float CacheSnapshot::v_scale(int pos, int kv_head, int block) const {
  return v_scales[(size_t(pos) * n_kv_heads + kv_head) * q8_blocks(head_dim) + block];
}

SequenceId Engine::fork(SequenceId, int) {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "fork: not supported by " + name() + " (traits.operations.fork is false)");
}

SequenceId Engine::start_keyed(uint64_t cache_key) {
  if (cache_key == 0) return start();
  throw EngineError(EngineError::Kind::kBadBatch, "start_keyed: not supported by " + name() +
                                                      " (traits.operations.cache_keys is false)");
}

void Engine::truncate(SequenceId, int) {
  throw EngineError(EngineError::Kind::kBadBatch, "truncate: not supported by " + name() +
                                                      " (traits.operations.truncate is false)");
}

void Engine::offload(SequenceId) {
  throw EngineError(EngineError::Kind::kBadBatch, "offload: not supported by " + name() +
                                                      " (traits.operations.offload is false)");
}

void Engine::save_state(SequenceId) {
  throw EngineError(EngineError::Kind::kBadBatch, "save: not supported by " + name() +
                                                      " (traits.operations.save_restore is false)");
}

void Engine::restore_state(SequenceId) {
  throw EngineError(EngineError::Kind::kBadBatch, "restore: not supported by " + name() +
                                                      " (traits.operations.save_restore is false)");
}

void Engine::erase(SequenceId, int, int) {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "erase: not supported by " + name() + " (traits.operations.erase is false)");
}

void Engine::shift(SequenceId, int, int, int) {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "shift: not supported by " + name() + " (traits.operations.shift is false)");
}

void Engine::div(SequenceId, int, int, int) {
  throw EngineError(EngineError::Kind::kBadBatch,
                    "div: not supported by " + name() + " (traits.operations.div is false)");
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
