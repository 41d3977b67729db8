// `--backend exec:CMD ARGS[?timeout=SECONDS]`: an engine in another process,
// spoken to over the protocol of docs/ENGINE_PROTOCOL.md. The child is started
// once, when the backend is resolved (its handshake gives the traits), and
// kept for every engine; a child that dies, hangs or answers malformed fails
// the property that was running, and the next engine creation starts a new
// one.
#pragma once

#include "backends/registry.h"

namespace kvcheck {

void register_exec_backend(BackendRegistry& registry);

// The per-call timeout of an exec: backend string: ?timeout=SECONDS, else
// KVCHECK_EXEC_TIMEOUT, else 30 s. Throws InputError on a bad value.
double exec_timeout_seconds(const BackendSpec& spec);

}  // namespace kvcheck
