// The engines kvcheck can check, by name: every driver (campaign, replay,
// shrink, the fuzz targets, the ctest property suite, the kill matrix) takes
// its engine from here, as a backend string:
//
//   NAME[?key=value&...]          a registered engine: cpu, cpu-reference, cuda
//   plugin:PATH.so[?key=value...] a C plugin (include/kvcheck/engine_plugin.h)
//   exec:CMD ARGS[?timeout=..&spin=..] an engine in another process (docs/ENGINE_PROTOCOL.md)
//
// Three option keys work on every backend and only weaken what it declares, to
// measure what a weaker engine costs in bug-finding power:
//   invariance=bounded   every invariance is checked within the bound only
//   profile=restricted   no cache snapshots, no capacity refusal, and one
//                        context shared by all sequences (a llama.cpp-like
//                        engine)
//   arithmetic=NAME      the bounds derived for a named arithmetic
//                        (engine/arithmetic_presets.h), wider than f32
// Any other key goes to the engine (a plugin's own options, e.g. bug=...).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_under_test.h"
#include "engine/faults.h"
#include "engine/traits.h"

namespace kvcheck {

struct Backend {
  std::string spec;  // the backend string it was made from, as case files record it
  EngineTraits traits;
  std::function<EngineFactory(FaultSet)> make_factory;
  bool weakened = false;     // invariance=, profile= or arithmetic= lowered what it declares
  bool forces_pool = false;  // EngineUnderTest::forces_pool
  // Its engines live in kvcheck's process and survive a fork: drivers check
  // them in a worker process, so that a crash is a verdict
  // (properties/rc/hunt_worker.h). False for engines in another process
  // already (exec:) and for a CUDA context, which a fork cannot take along.
  bool forkable = false;

  // The engine under test with these faults switched on (the kill matrix);
  // an empty set is the engine as it is.
  EngineUnderTest under_test(FaultSet faults = {}) const;
};

// "cpu?invariance=bounded" -> name "cpu", options {invariance: bounded}.
struct BackendSpec {
  std::string name;  // "cpu", or "plugin:/path/x.so"
  std::map<std::string, std::string> options;
  std::string options_text;  // what followed '?', for engines that take it whole
};
// Throws InputError on an empty name or a malformed option.
BackendSpec parse_backend_spec(const std::string& text);

class BackendRegistry {
 public:
  // Makes the backend from its options; throws InputError on an option it
  // does not know. The generic keys above are already consumed.
  using Maker = std::function<Backend(const BackendSpec&)>;

  void add(const std::string& name, const std::string& description, Maker maker);
  // Backend strings starting with `prefix` ("plugin:") go to `maker`.
  void add_prefix(const std::string& prefix, const std::string& description, Maker maker);

  // Throws InputError for an unknown name (listing the registered ones), a
  // bad option, or an engine whose traits do not validate.
  Backend resolve(const std::string& text) const;

  struct Entry {
    std::string name;  // or prefix
    std::string description;
    bool is_prefix = false;
    Maker maker;
  };
  const std::vector<Entry>& entries() const { return entries_; }
  std::string names() const;  // "cpu, cpu-reference, plugin:PATH.so"

 private:
  std::vector<Entry> entries_;
};

// The in-tree engines and the plugin loader, registered once.
const BackendRegistry& backend_registry();

// Throws InputError when `spec` has an option outside `known`.
void reject_unknown_options(const BackendSpec& spec, const std::vector<std::string>& known);

// backend_runs_named_code: model/command_text.h.

// The backend that replays or shrinks a case file: `given` (the user's
// --backend) when not empty, else the one the case records, else
// `fallback`. A case from a bug report must not run code, so a plugin: or
// exec: backend that only the case names is refused before anything is
// loaded or started: InputError (exit 2) naming it and the --backend
// argument that runs it. Every driver that reads a case's backend asks here.
std::string backend_for_case(const std::string& recorded, const std::string& given,
                             const std::string& fallback);

}  // namespace kvcheck
