// The one table of properties: every fact about a property that the
// drivers and the checks read (its name and label, the invariance it
// compares under, the operation it needs, whether it needs a bound, its
// check and its place in check_all's order) is one field of its row.
// Adding a property is its file in checks/, its row in property_table.cpp
// and its enumerator in property.h; nothing else names it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "engine/traits.h"
#include "properties/property.h"

namespace kvcheck::checks {

struct Context;

struct PropertyRow {
  Property property;
  std::string_view name;   // property_name: "oracle", "chunking", ...
  std::string_view label;  // property_label: "P1", ...
  // What the engine promises for the comparison the property makes. A
  // bounded promise needs a derived bound (never_applicable).
  Invariance (*invariance)(const EngineTraits& traits);
  // What the property needs beyond the scenario's own calls, or nullptr.
  const char* (*operation_needed)(const OperationTraits& operations);
  // It compares with the oracle's bound B (or 2B) whatever the invariance.
  bool needs_bound;
  // Why it applies to no scenario on this engine for a reason of its own,
  // "" when none; nullptr when it has no such reason.
  std::string (*never_applicable)(const EngineUnderTest& subject, const Checkpoint* model);
  // Its first run is the scenario's own: with a pool that may run dry that
  // run is the probe (check_property), so no probe runs before it.
  bool first_run_probes;
  Verdict (*check)(const Context& context);
  int check_all_place;  // 0 runs first in check_all
};

// The row of `property`; nullptr for a value that names none (kCount).
const PropertyRow* find_property_row(Property property);
// The row of a property that has one.
const PropertyRow& property_row(Property property);
// Every row, in enum order.
std::span<const PropertyRow> property_rows();
// The properties by check_all_place.
std::span<const Property> properties_in_check_all_order();

}  // namespace kvcheck::checks
