// The CUDA engine: the Engine interface with device-resident weights and a
// per-layer, per-sequence KV cache on the GPU, with the CPU engine's exact
// semantics (rows, compaction, reset, every fault switch). Plain C++: usable
// from any translation unit; only kvcheck_cuda_engine needs the toolkit.
#pragma once

#include <memory>

#include "engine/engine.h"

namespace kvcheck {

// Throws InputError naming the field when the config, the weights' shapes or
// the options are inconsistent, or when the config exceeds what the kernels
// support (head_dim <= 256); EngineError(kDevice) when there is no device or
// the device memory does not suffice (naming the bytes requested).
std::unique_ptr<Engine> make_cuda_engine(const Config& config, const Weights& weights,
                                         const EngineOptions& options);

// True when the CUDA runtime works and sees at least one device. Tests skip
// (GTEST_SKIP) when it is false.
bool cuda_device_available();

}  // namespace kvcheck
