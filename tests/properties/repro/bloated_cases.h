// Deliberately large failing scenarios, one per fault, as the starting point
// for showing that the shrinker reaches the catalogue's shrink targets.
#pragma once

#include <cstdint>
#include <optional>

#include "properties/repro/case_file.h"
#include "tests/properties/repro/fault_targets.h"

namespace kvcheck::test {

// The first generated scenario (RapidCheck generators at full size, seeds
// from `seed` on) of at least `min_size` that fails the target's property
// with its fault on, drawn with the property's emphasis, then (`tries`
// more) with the fault's kill-row emphasis; nullopt when none does. Most draws are
// smaller than `min_size` and cost only their generation: about one in ten
// of the default generator's is 100 or more, fewer of them paged with a fork.
std::optional<CaseFile> bloated_case(const FaultTarget& target, int min_size, uint64_t seed = 1,
                                     int tries = 1600);

}  // namespace kvcheck::test
