// Properties are plain functions Scenario x Engine factory -> Verdict, with no
// RapidCheck inside, so RapidCheck, libFuzzer and replay all drive the same
// code.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_under_test.h"  // EngineFactory, EngineUnderTest
#include "engine/traits.h"
#include "properties/feature_use.h"
#include "properties/scenario.h"

namespace kvcheck {

enum class Property : uint8_t {
  kOracle,       // P1 every logit matches the oracle within the derived bound
  kChunking,     // P2 another chunking gives bitwise equal logits
  kBatch,        // P3 alone vs inside a ragged batch, any row: bitwise equal
  kReset,        // P4 after reset / in a reused row == fresh engine, bitwise
  kCompaction,   // P5 survivors of finishes == their solo runs, bitwise
  kCacheState,   // P6 cached K/V after every call == oracle K/V; lengths; no poison
  kGqa,          // P7 GQA == MHA with repeat_interleaved K/V weights, bitwise
  kDeterminism,  // P8 the same scenario twice gives the same bits
  kCapacity,     // P9 past capacity: the documented error, others intact
  kCrossEngine,  // P10 the same scenario on a reference engine: logits within B + B_ref
  kSharing,      // P11 forks' lineages == their never-shared replays (isolation both ways)
  kRollback,     // P12 truncated sequences == their never-fed replays
  kPool,         // P13 paged pool accounting after every call
  kPoison,       // P14 storage no sequence holds is poisoned (NaN) after every call
  kPrefix,       // P15 a prefix-cache hit's logits == a cold replay of the same content
  kCount
};
constexpr int kPropertyCount = static_cast<int>(Property::kCount);

std::string_view property_name(Property p);   // "oracle", "chunking", ...
std::string_view property_label(Property p);  // "P1", ...
std::optional<Property> parse_property(std::string_view name);

// Where a failure shows first. -1 where not applicable.
struct Location {
  int call = -1;                                        // index into Scenario::calls
  int sequence = -1;                                    // index into Scenario::sequences
  int position = -1;                                    // absolute token position
  int layer = -1;                                       // P6: first layer whose cache diverges
  int kv_head = -1;                                     // P6
  int first_bad_position = -1, last_bad_position = -1;  // P6: range of wrong slots
};

struct Verdict {
  Property property = Property::kOracle;
  bool passed = true;
  bool applicable = true;  // false when the scenario has nothing this property can check
  double worst_ratio = 0;  // P1/P6: largest error / bound seen (passes stay < 1)
  Location where;
  std::string summary;  // one line
  std::string detail;   // multi-line report for a person (replay prints it)
  // Where the engine's own code failed, when it said: the last frames of its
  // traceback, innermost last, one a line ("my_gpt.py:88 in forward: ..."),
  // as an exec: child sends them (docs/ENGINE_PROTOCOL.md); "" otherwise.
  std::string trace;
  // The cache features the engine said happened while this was checked
  // (feature_use.h): the campaign's proof of use.
  FeatureMask features_used = 0;
};

// Anything the engine throws on a valid call (not only EngineError) fails the
// property with the exception's text; a scenario the traits exclude, or a
// property needing an operation the engine lacks, is not applicable and says
// why ("the engine lacks reset").
Verdict check_property(Property property, const Scenario& scenario, const EngineUnderTest& subject);

// Empty when an engine with these traits can run the scenario's calls and
// shapes; otherwise what it lacks. Generators and the shrinker keep to it.
std::string traits_exclude(const EngineTraits& traits, const Scenario& scenario);

// Why `property` applies to no scenario at all on this engine, from its
// traits alone ("" when some scenario can apply): an operation it needs is
// not declared, P10 without a reference, P7 on a fixed MHA checkpoint (`model`, may be null).
// Drivers do not run such a property; they report it as not run, with this reason.
std::string never_applicable(Property property, const EngineUnderTest& subject,
                             const Checkpoint* model = nullptr);

// Every property on one scenario, the most localizing first (P6 names the
// layer and slots); returns the first failing verdict, or a passing one.
// The kill matrix's 'any' column, the campaigns and the fuzzers use it.
Verdict check_all(const Scenario& scenario, const EngineUnderTest& subject);
// The order check_all runs them in.
std::span<const Property> check_all_order();

}  // namespace kvcheck
