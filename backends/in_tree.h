// The engines built in this tree, as backends: their traits are declared
// here, once, next to the factories that make them.
#pragma once

#include "backends/registry.h"
#include "engine/engine.h"

namespace kvcheck {

void register_in_tree_backends(BackendRegistry& registry);

// What a driver runs when no --backend is given: cpu and cpu-reference, and
// cuda where it is built and this machine has a device.
std::vector<std::string> default_backend_names();

// The CPU engine with these faults and this kernel path (threads = 1). Unit
// tests and benchmarks of the engine itself use it directly; drivers go
// through the registry.
// paged > 0 (block size) stores a scenario that leaves block_size 0 in a pool
// of `pool` blocks (0: the default size) instead: cpu?paged=B&pool=N; prefix
// adds a prefix cache to every paged scenario (cpu?paged=B&prefix=1).
EngineFactory cpu_engine_factory(FaultSet faults = {}, KernelPath kernels = KernelPath::kOptimized,
                                 int paged = 0, int pool = 0, bool prefix = false);

// What the in-tree CPU engine declares (both kernel paths) over a transport
// that carries the core calls only (the C plugin ABI v1, engine protocol v1):
// no fork, truncate, paged storage, pool report, storage check or storage map.
EngineTraits cpu_engine_traits(KernelPath kernels = KernelPath::kOptimized);
// In process (the `cpu` and `cpu-reference` backends): everything it offers,
// the operations of docs/OPERATIONS.md included.
EngineTraits cpu_engine_traits_with_operations(KernelPath kernels = KernelPath::kOptimized);

// What the in-tree CUDA engine declares (the `cuda` backend): the CPU
// engine's operations, no q8_0 K/V, head_dim <= 256. Plain data, defined in
// every build, so that tests without nvcc or a device can read it.
EngineTraits cuda_engine_traits();

}  // namespace kvcheck
