// The InputError a backend string gets from the registry, as text.
#pragma once

#include <string>

#include "backends/registry.h"
#include "model/status.h"

namespace kvcheck::test {

inline std::string resolve_error(const std::string& backend) {
  try {
    backend_registry().resolve(backend);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(resolved without an error)";
}

}  // namespace kvcheck::test
