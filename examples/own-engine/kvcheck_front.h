// The example engine as a kvcheck backend in process: what
// KVCHECK_CONFORMANCE_MAIN registers as "own-engine".
#pragma once

#include <kvcheck/conformance.h>

// Options of the backend string: bug=restart_positions (the seeded bug).
kvcheck::Backend make_own_engine(const kvcheck::BackendSpec& spec);
