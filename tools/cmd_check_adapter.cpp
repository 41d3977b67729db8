// `kvcheck check-adapter --backend exec:CMD`: every message of the engine
// protocol once on an exec: child, protocol violations (the adapter's side)
// reported apart from cache bugs (the engine's side) and from shapes the
// traits allow that the engine refuses (tools/adapter_check.h). Exit 0 when
// clean, 1 when anything was found, 2 on bad input (a backend that is not
// exec:, a command that cannot start).
#include <cstdio>
#include <memory>
#include <string>

#include "backends/exec/exec.h"
#include "model/status.h"
#include "tools/adapter_check.h"
#include "tools/commands.h"

namespace kvcheck::cli {

namespace {

struct CheckAdapterOptions {
  std::string backend;
};

int run_check_adapter(const CheckAdapterOptions& o) {
  const BackendSpec spec = parse_backend_spec(o.backend);
  if (!spec.name.starts_with("exec:"))
    throw InputError("--backend " + o.backend + ": check-adapter checks exec: backends only");
  reject_unknown_options(spec, {"timeout", "spin"});
  const std::string command = spec.name.substr(5);
  if (command.find_first_not_of(" \t") == std::string::npos)
    throw InputError("--backend exec: needs a command, e.g. exec:'python3 engine.py'");
  const ChildWaits waits = exec_waits(spec);
  std::printf("check-adapter: %s (per-call timeout %lld ms)\n", o.backend.c_str(),
              (long long)waits.timeout.count());
  std::unique_ptr<AdapterCheck> check;
  try {
    check = std::make_unique<AdapterCheck>(command, waits);
  } catch (const ChildFault& e) {
    throw InputError(std::string("check-adapter: ") + e.what());
  }
  return check->run();
}

}  // namespace

Action add_check_adapter(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check-adapter",
      "Exercise every message of the engine protocol on an exec: backend, and the model shapes "
      "its traits allow; report protocol violations (the adapter's side) apart from cache bugs "
      "(the engine's side) and refused shapes (the traits' side)");
  auto o = std::make_shared<CheckAdapterOptions>();
  cmd->add_option("--backend", o->backend,
                  "exec:'CMD ARGS'[?OPTIONS]: timeout=SECONDS, spin=MICROSECONDS, joined by &")
      ->required();
  return [cmd, o]() { return cmd->parsed() ? run_check_adapter(*o) : -1; };
}

}  // namespace kvcheck::cli
