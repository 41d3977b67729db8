// The campaign's kill matrix: every fault against the properties, with cases
// to kill and the shrunk counterexample's size.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/backends.h"

namespace kvcheck::cli {

struct KillMatrix {
  bool all_killed = true;
  std::string text;     // table for a person
  nlohmann::json json;  // the same as data
};

KillMatrix run_kill_matrix(const Backend& backend, uint64_t seed, int cases_per_fault,
                           double seconds, const std::function<void(const std::string&)>& progress);

}  // namespace kvcheck::cli
