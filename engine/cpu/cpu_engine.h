// The CPU engine: SIMD kernels (engine/cpu/kernels.h) over a per-layer,
// per-sequence KV cache (engine/cpu/kv_cache.h).
#pragma once

#include <memory>

#include "engine/cpu/packed_weights.h"
#include "engine/engine.h"

namespace kvcheck {

// Throws InputError naming the field when the config, the weights' shapes or
// the options are inconsistent.
std::unique_ptr<Engine> make_cpu_engine(const Config& config, const Weights& weights,
                                        const EngineOptions& options);

// As make_cpu_engine, packing each tensor from where `read` says (a field of
// `layout`, a Weights with config.n_layers empty layers, -> the caller's
// buffer) instead of from a Weights, so that the weights are copied once.
// The caller has checked the tensors' sizes against the config.
std::unique_ptr<Engine> make_cpu_engine_reading(const Config& config, const Weights& layout,
                                                const cpu::TensorSource& read,
                                                const EngineOptions& options);

// The same engine compiled with every fault branch removed. It exists only so
// a benchmark can show that the switches cost nothing when off.
std::unique_ptr<Engine> make_cpu_engine_without_faults(const Config& config, const Weights& weights,
                                                       const EngineOptions& options);

}  // namespace kvcheck
