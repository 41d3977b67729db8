#include "backends/in_tree.h"

#include <cstdlib>

#include "engine/cpu/cpu_engine.h"
#include "model/status.h"
#ifdef KVCHECK_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace kvcheck {

EngineFactory cpu_engine_factory(FaultSet faults, KernelPath kernels, int paged, int pool,
                                 bool prefix) {
  return [faults, kernels, paged, pool, prefix](const Config& config, const Weights& weights,
                                                const EngineOptions& options) {
    EngineOptions with = options;
    with.faults = faults;
    with.kernels = kernels;
    // cpu?paged=B: scenarios that leave storage contiguous get blocks of B
    // (not a windowed model: its rings are contiguous only).
    if (with.block_size == 0 && paged > 0 && config.sliding_window == 0) {
      with.block_size = paged, with.pool_blocks = pool;
    }
    // cpu?paged=B&prefix=1: and a prefix cache where the scenario has none.
    if (prefix && with.block_size > 0) with.prefix_cache = true;
    return make_cpu_engine(config, weights, with);
  };
}

EngineTraits cpu_engine_traits(KernelPath kernels) {
  EngineTraits t;
  t.identity = {kernels == KernelPath::kOptimized ? "kvcheck-cpu" : "kvcheck-cpu-reference", "1"};
  t.operations.fault_switches = true;
  t.limits.max_rows = 4096;  // make_cpu_engine's own bound
  t.limits.kv_dtypes.push_back(KvDtype::kQ8_0);
  return t;
}

namespace {

// The operations of docs/OPERATIONS.md and the storage map, which both
// in-tree engines offer through the shared SequenceTable.
void declare_table_operations(OperationTraits& o) {
  o.fork = true;
  o.truncate = true;
  o.paged = true;
  o.pool_report = true;
  o.storage_check = true;
  o.storage_map = true;
  o.prefix_cache = true;
}

}  // namespace

EngineTraits cpu_engine_traits_with_operations(KernelPath kernels) {
  EngineTraits t = cpu_engine_traits(kernels);
  declare_table_operations(t.operations);
  // Rings of W slots on contiguous storage (docs/OPERATIONS.md, "Sliding
  // windows"); the CUDA engine does not declare them. The transports
  // (kvcheck-serve, the test plugin) declare these traits less the storage
  // map and the fault switches.
  t.operations.sliding_window = true;
  // Context shift: contiguous storage only (a paged scenario's erase or
  // shift is refused; the generators never draw them together).
  t.operations.erase = true;
  t.operations.shift = true;
  t.operations.div = true;  // the same re-rotation, cells may share a position
  // An abort path of its own (SequenceTable::abort_paged), keyed prefix
  // chains and a host tier; the CUDA engine declares none of them until a
  // device tests them.
  t.operations.abort = true;
  t.operations.cache_keys = true;
  // A hit's prompt rows computed cold when asked (EngineOptions::prompt_logits).
  t.operations.prompt_logits = true;
  t.operations.offload = true;
  // Sequence state save and restore (contiguous storage; docs/OPERATIONS.md,
  // "Save and restore").
  t.operations.save_restore = true;
  return t;
}

EngineTraits cuda_engine_traits() {
  EngineTraits t;
  t.identity = {"kvcheck-cuda", "1"};
  t.operations.fault_switches = true;
  // Over device storage. Compiled here; the operations have never run on a
  // GPU (docs/CUDA.md, "Operations").
  declare_table_operations(t.operations);
  t.limits.max_head_dim = 256;  // the attention kernel's shared-memory tile
  t.limits.max_rows = 4096;
  return t;
}

namespace {

// A paged=/pool= option value: an integer in [lo, hi], else exit 2 naming it.
int int_option(const BackendSpec& spec, const char* key, int lo, int hi) {
  const auto it = spec.options.find(key);
  if (it == spec.options.end()) return 0;
  char* end = nullptr;
  const long value = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || value < lo || value > hi) {
    throw InputError("--backend " + spec.name + "?" + key + "=" + it->second +
                     ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
  }
  return static_cast<int>(value);
}

Backend cpu_backend(const BackendSpec& spec, KernelPath kernels) {
  reject_unknown_options(spec, {"paged", "pool", "prefix"});
  const int paged = int_option(spec, "paged", 1, 32);
  const int pool = int_option(spec, "pool", 1, 1 << 20);
  const bool prefix = int_option(spec, "prefix", 0, 1) == 1;
  if (pool > 0 && paged == 0) {
    throw InputError("--backend " + spec.name + "?pool=" + std::to_string(pool) +
                     ": a pool needs paged=B (block size 1..32)");
  }
  if (prefix && paged == 0) {
    throw InputError("--backend " + spec.name +
                     "?prefix=1: a prefix cache needs paged=B (block size 1..32)");
  }
  Backend b;
  b.forkable = true;
  b.traits = cpu_engine_traits_with_operations(kernels);
  b.forces_pool = pool > 0;
  // cpu?paged=B makes every scenario paged, where erase, shift, save and
  // restore are refused: they are then not applicable instead of failures.
  if (paged > 0) {
    b.traits.operations.erase = b.traits.operations.shift = b.traits.operations.div = false;
    b.traits.operations.save_restore = false;
  }
  b.make_factory = [kernels, paged, pool, prefix](FaultSet faults) {
    return cpu_engine_factory(faults, kernels, paged, pool, prefix);
  };
  return b;
}

#ifdef KVCHECK_HAVE_CUDA
Backend cuda_backend(const BackendSpec& spec) {
  reject_unknown_options(spec, {});
  if (!cuda_device_available()) {
    throw InputError(
        "--backend cuda: the CUDA engine is built, but this machine has no CUDA device; run "
        "on a machine with an NVIDIA GPU (docs/CUDA.md, ci/gpu)");
  }
  Backend b;
  b.traits = cuda_engine_traits();
  b.make_factory = [](FaultSet faults) -> EngineFactory {
    return [faults](const Config& config, const Weights& weights, const EngineOptions& options) {
      EngineOptions with = options;
      with.faults = faults;
      return make_cuda_engine(config, weights, with);
    };
  };
  return b;
}
#endif

}  // namespace

std::vector<std::string> default_backend_names() {
  std::vector<std::string> names = {"cpu", "cpu-reference"};
#ifdef KVCHECK_HAVE_CUDA
  if (cuda_device_available()) names.push_back("cuda");
#endif
  return names;
}

void register_in_tree_backends(BackendRegistry& registry) {
  registry.add("cpu", "the in-tree CPU engine, Highway SIMD kernels",
               [](const BackendSpec& s) { return cpu_backend(s, KernelPath::kOptimized); });
  registry.add("cpu-reference", "the in-tree CPU engine, scalar reference kernels",
               [](const BackendSpec& s) { return cpu_backend(s, KernelPath::kReference); });
#ifdef KVCHECK_HAVE_CUDA
  registry.add("cuda", "the in-tree CUDA engine (needs a CUDA device at run time)", cuda_backend);
#endif
}

}  // namespace kvcheck
