// kvcheck-serve: the in-tree CPU engine behind the engine protocol
// (docs/ENGINE_PROTOCOL.md), so that `--backend exec:kvcheck-serve` proves
// the protocol on a bitwise-invariant engine and measures what it costs.
//   kvcheck-serve [--reference] [--protocol 1|2] [--fault NAME[,NAME]]
//                 [--spin MICROSECONDS]
//   (--reference: the scalar reference kernels; --protocol 1: offer only
//   version 1, to test that kvcheck still speaks it; --fault: the engine's
//   fault switches (engine/faults.h), which the protocol does not carry, so
//   that a fault in fork or truncate can be shown caught through the protocol;
//   --spin: how long it polls stdin before it sleeps, else
//   KVCHECK_EXEC_SPIN, else wire::default_spin())
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "backends/exec/exec_wire.h"
#include "backends/in_tree.h"
#include "engine/cpu/cpu_engine.h"
#include "model/status.h"
#include "tools/serve_loop.h"

namespace kvcheck {
namespace {

// The CPU engine with every operation of docs/OPERATIONS.md (the protocol
// carries each; the engine keeps them bitwise like everything else), the
// sliding window included: the config's window reaches the engine through
// the model file's kvcheck.config, and a ring's positions come back in the
// cache reply. Not the storage map nor fault switches: the protocol carries
// neither (--fault sets them here).
class CpuMaker : public EngineMaker {
 public:
  CpuMaker(KernelPath kernels, FaultSet faults) : kernels_(kernels), faults_(faults) {}
  EngineTraits traits() override {
    EngineTraits traits = cpu_engine_traits_with_operations(kernels_);
    traits.operations.fault_switches = false;
    traits.operations.storage_map = false;
    traits.identity.name += "-serve";
    return traits;
  }
  std::unique_ptr<Engine> create(ServedModel& model, const EngineOptions& asked) override {
    EngineOptions options = asked;
    options.kernels = kernels_;
    options.faults = faults_;
    return make_cpu_engine(model.file.config, model.file.weights, options);
  }

 private:
  KernelPath kernels_;
  FaultSet faults_;  // --fault
};

}  // namespace
}  // namespace kvcheck
int main(int argc, char** argv) {
  kvcheck::KernelPath kernels = kvcheck::KernelPath::kOptimized;
  int max_version = kvcheck::wire::kProtocolVersion;
  kvcheck::FaultSet faults;
  // --spin, else kvcheck's own KVCHECK_EXEC_SPIN (which the child inherits),
  // else the default.
  const char* spin_text = std::getenv("KVCHECK_EXEC_SPIN");
  std::string spin_where = "kvcheck-serve: KVCHECK_EXEC_SPIN=";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reference") == 0) {
      kernels = kvcheck::KernelPath::kReference;
    } else if (std::strcmp(argv[i], "--protocol") == 0 && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "1") == 0 || std::strcmp(argv[i + 1], "2") == 0)) {
      max_version = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--fault") == 0 && i + 1 < argc) {
      const kvcheck::Result<kvcheck::FaultSet> parsed = kvcheck::parse_fault_list(argv[++i]);
      if (!parsed.ok()) {
        std::fprintf(stderr, "kvcheck-serve: --fault: %s\n", parsed.error().c_str());
        return 2;
      }
      faults = parsed.value();
    } else if (std::strcmp(argv[i], "--spin") == 0 && i + 1 < argc) {
      spin_text = argv[++i], spin_where = "kvcheck-serve: --spin ";
    } else {
      std::fprintf(stderr,
                   "kvcheck-serve: unknown argument \"%s\" (known: --reference, --protocol 1|2, "
                   "--fault NAME[,NAME], --spin MICROSECONDS)\n",
                   argv[i]);
      return 2;
    }
  }
  const std::optional<std::chrono::microseconds> spin = kvcheck::server_spin(spin_text, spin_where);
  if (!spin) return 2;
  kvcheck::CpuMaker maker(kernels, faults);
  return kvcheck::serve_engines(maker, max_version, *spin, "kvcheck-serve");
}
