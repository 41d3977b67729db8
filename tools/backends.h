// The backends a command runs on, from the registry (backends/registry.h).
#pragma once

#include <string>
#include <vector>

#include "backends/registry.h"

namespace kvcheck::cli {

// The named backend strings, resolved; when `names` is empty, the in-tree
// engines this machine can run (cpu, cpu-reference, and cuda where built and
// a device is present). Throws InputError naming an unknown or bad backend.
std::vector<Backend> chosen_backends(const std::vector<std::string>& names);

// The --reference backend of P10, or null when `name` is empty.
std::shared_ptr<const EngineUnderTest> reference_engine(const std::string& name);

// The engine under test for a driver: the backend with these faults, and the
// P10 reference. Throws InputError when faults are asked of a backend that
// has no fault switches.
EngineUnderTest engine_under_test(const Backend& backend, FaultSet faults,
                                  std::shared_ptr<const EngineUnderTest> reference);

// One line per declared trait group, for the campaign header and
// `kvcheck backends`.
std::string traits_summary(const EngineTraits& traits, const std::string& indent);

}  // namespace kvcheck::cli
