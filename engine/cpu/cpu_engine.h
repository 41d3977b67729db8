// The CPU engine: SIMD kernels (engine/cpu/kernels.h) over a per-layer,
// per-sequence KV cache (engine/cpu/kv_cache.h).
#pragma once

#include <memory>

#include "engine/engine.h"

namespace kvcheck {

// Throws InputError naming the field when the config, the weights' shapes or
// the options are inconsistent.
std::unique_ptr<Engine> make_cpu_engine(const Config& config, const Weights& weights,
                                        const EngineOptions& options);

// The same engine compiled with every fault branch removed. It exists only so
// a benchmark can show that the switches cost nothing when off.
std::unique_ptr<Engine> make_cpu_engine_without_faults(const Config& config, const Weights& weights,
                                                       const EngineOptions& options);

}  // namespace kvcheck
