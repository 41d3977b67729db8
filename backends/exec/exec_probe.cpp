// Probes an exec: child's declared optional operations once, at resolve
// (exec_probe.h says why).
#include "backends/exec/exec_probe.h"

#include <exception>

#include "backends/exec/exec_session.h"
#include "model/status.h"

namespace kvcheck {

void probe_declared_operations(const std::string& spec, const EngineTraits& traits,
                               const MakeProbeEngine& make) {
  const OperationTraits& ops = traits.operations;
  if (!ops.fork && !ops.truncate && !ops.pool_report && !ops.storage_check && !ops.erase &&
      !ops.shift && !ops.div && !ops.prefix_cache && !ops.offload && !ops.save_restore) {
    return;
  }
  constexpr SequenceId kNeverStarted = 987654321;
  EngineOptions options;
  options.capacity = 4;
  options.max_rows = 2;
  options.kv_dtype = traits.limits.kv_dtypes.empty() ? KvDtype::kF32 : traits.limits.kv_dtypes[0];
  for (const Config& config : {llama_tiny(), gpt2_tiny()}) {
    if (!traits.refuses(config, options.kv_dtype, options.capacity, options.max_rows).empty())
      continue;
    std::unique_ptr<Engine> engine;
    try {
      engine = make(config, options);
    } catch (const std::exception&) {
      return;  // not about the operations: the properties will see it
    }
    for (const std::string op : {"fork", "truncate", "pool_report", "storage_check", "erase",
                                 "shift", "div", "flush", "offload", "save"}) {
      try {
        if (op == "fork" && ops.fork) engine->fork(kNeverStarted, 0);
        if (op == "truncate" && ops.truncate) engine->truncate(kNeverStarted, 0);
        if (op == "erase" && ops.erase) engine->erase(kNeverStarted, 0, 0);
        if (op == "shift" && ops.shift) engine->shift(kNeverStarted, 0, 0, 0);
        if (op == "div" && ops.div) engine->div(kNeverStarted, 0, 0, 1);
        if (op == "pool_report" && ops.pool_report) engine->pool();
        if (op == "storage_check" && ops.storage_check) engine->unheld_storage_check();
        if (op == "flush" && ops.prefix_cache) engine->flush_prefix_cache();
        if (op == "offload" && ops.offload) engine->offload(kNeverStarted);
        if (op == "save" && ops.save_restore) engine->save_state(kNeverStarted);
      } catch (const exec_session::NotOffered& e) {
        const std::string trait = op == "flush"  ? "prefix_cache"
                                  : op == "save" ? "save_restore"
                                                 : op;
        throw InputError("--backend " + spec + ": traits.operations." + trait +
                         " is true, but the child refused " + (op == "pool_report" ? "pool" : op) +
                         ": " + e.what());
      } catch (const std::exception&) {
        // The refusal a child that offers it owes, or a dead child (the
        // properties report that).
      }
    }
    return;
  }
}

}  // namespace kvcheck
