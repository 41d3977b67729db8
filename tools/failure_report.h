// What a run prints when a property fails: the seed, the shrunk scenario and
// the verdict's localization, so the failure can be reproduced and read.
#pragma once

#include <cstdint>
#include <string>

#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/hunt.h"

namespace kvcheck::cli {

void report_failure(const rcgen::HuntResult& result, Property property, const std::string& backend,
                    FaultSet faults, uint64_t seed, const std::string& failures_dir);

}  // namespace kvcheck::cli
