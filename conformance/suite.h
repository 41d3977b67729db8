// The conformance suite: every property (P1..P10) under RapidCheck and
// GoogleTest for each engine registered here, with a case file written for
// every failure; and, in the same binary, replay and shrink of those case
// files (`--replay FILE`, `--shrink FILE`), because `kvcheck replay` cannot
// load a factory that lives in a user's test binary.
//
// The in-tree ctest property suite and a user's conformance test built
// against the installed package (docs/ENGINES.md) are this same code:
//
//   #include <kvcheck/conformance.h>
//   kvcheck::Backend make_my_engine(const kvcheck::BackendSpec& spec);
//   KVCHECK_CONFORMANCE_MAIN("my-engine", make_my_engine)
#pragma once

#include <string>
#include <vector>

#include "backends/registry.h"

namespace kvcheck::conformance {

struct SuiteBackend {
  std::string spec;         // backend string, e.g. "cpu" or "my-engine?bug=x"
  int cases = 1000;         // generated cases per property (RC_PARAMS max_success overrides)
  std::string reference;    // P10's reference backend string; empty: P10 not applicable
  std::string skip_reason;  // non-empty: every test skips with this (e.g. "no CUDA device")
};

// The registry the suite resolves backends in: the in-tree engines and the
// plugin loader, plus whatever add_engine() adds.
BackendRegistry& suite_registry();

// Registers a user's engine under `name`; `maker` receives the options of
// the backend string ("my-engine?bug=restart_positions").
void add_engine(const std::string& name, const std::string& description,
                BackendRegistry::Maker maker);

// Runs the suite on `backends` (each × every property, as GoogleTest tests
// named <backend>.<Pn_property>), or with --replay/--shrink FILE replays or
// shrinks a case file on the backend it records (or --backend; a plugin the
// case alone names is refused, backend_for_case in backends/registry.h). Extra
// options: --backend SPEC (repeatable; replaces `backends`), --cases N,
// --reference SPEC, --failures DIR; --help lists them, then GoogleTest's own
// flags. Returns the process exit code.
int run(int argc, char** argv, std::vector<SuiteBackend> backends);

}  // namespace kvcheck::conformance

// The main() of a user's conformance binary: registers `maker` as `name` and
// checks it, with the in-tree CPU engine as P10's reference.
#define KVCHECK_CONFORMANCE_MAIN(name, maker)                                  \
  int main(int argc, char** argv) {                                            \
    ::kvcheck::conformance::add_engine(name, "the engine under test", maker);  \
    return ::kvcheck::conformance::run(argc, argv, {{name, 1000, "cpu", ""}}); \
  }
