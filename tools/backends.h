// The engines a campaign can check, by name.
#pragma once

#include <string>
#include <vector>

#include "engine/faults.h"
#include "properties/property.h"

namespace kvcheck::cli {

struct Backend {
  std::string name;  // "cpu", "cpu-reference", "cuda"
  std::function<EngineFactory(FaultSet)> make_factory;
};

// Every backend this build and machine can run.
std::vector<Backend> available_backends();

// The named backends (all available ones when `names` is empty). Throws
// InputError naming an unknown or unavailable backend.
std::vector<Backend> chosen_backends(const std::vector<std::string>& names);

}  // namespace kvcheck::cli
