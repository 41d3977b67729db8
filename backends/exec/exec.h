// `--backend exec:CMD ARGS[?OPTIONS]` (timeout=SECONDS, spin=MICROSECONDS,
// joined by &): an engine in another process, spoken to over the protocol of
// docs/ENGINE_PROTOCOL.md. The child is started
// once, when the backend is resolved (its handshake gives the traits), and
// kept for every engine; a child that dies, hangs or answers malformed fails
// the property that was running, and the next engine creation starts a new
// one.
#pragma once

#include <optional>

#include "backends/exec/exec_child.h"
#include "backends/registry.h"

namespace kvcheck {

void register_exec_backend(BackendRegistry& registry);

// How kvcheck waits on the child of an exec: backend string: the per-call
// timeout (?timeout=SECONDS, else KVCHECK_EXEC_TIMEOUT, else 30 s) and the
// spin before it sleeps on a reply (?spin=MICROSECONDS, else
// KVCHECK_EXEC_SPIN, else wire::default_spin(); 0 never spins). Throws
// InputError on a bad value.
ChildWaits exec_waits(const BackendSpec& spec);

// How many engine processes the exec: backend behind `factory` has started
// (a child that dies is replaced by the next one on the next engine), or
// nullopt for a factory of any other backend. Cases checked while it stays
// the same ran in one process, in order: an engine that leaks state between
// cases fails a case only after some of them (tools/case_history.h).
std::optional<int> exec_child_generation(const EngineFactory& factory);

// A spin in microseconds, [0, 100000], read from `text`; `where` names its
// source in the InputError (e.g. "kvcheck-serve: --spin ").
std::chrono::microseconds exec_spin(const std::string& text, const std::string& where);

}  // namespace kvcheck
