// Shared by the GPU tests: the skip that keeps them green on machines
// without a device, and the CUDA engine factory the properties take.
#pragma once

#include <gtest/gtest.h>

#include "engine/cuda/cuda_engine.h"
#include "engine/engine_under_test.h"

namespace kvcheck::test {

// Skips the current test cleanly (GTEST_SKIP) when no CUDA device is
// present: cudaGetDeviceCount fails or returns 0.
#define KVCHECK_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (!::kvcheck::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Makes CUDA engines with the given faults (the CUDA engine has one kernel
// path and ignores `kernels` and `threads`).
inline EngineFactory cuda_engine_factory(FaultSet faults = {}) {
  return [faults](const Config& config, const Weights& weights, const EngineOptions& options) {
    EngineOptions with = options;
    with.faults = faults;
    return make_cuda_engine(config, weights, with);
  };
}

}  // namespace kvcheck::test
