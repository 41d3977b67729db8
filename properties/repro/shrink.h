// A deterministic shrinker for failing scenarios, whatever produced them (a
// RapidCheck run, a fuzz crash, a hand-written case). No RapidCheck: a case
// file's scenario has no genes to shrink, so this one works on the Scenario
// itself.
//
// Each round lists every candidate one edit away (drop a sequence or a call,
// keep one sequence, cut the schedule, shorten or drop a chunk, merge two
// steps, fewer layers, heads, KV heads, narrower dims, a smaller vocabulary
// with token ids remapped, smaller capacity/max_pos/max_rows, simpler tokens,
// each call's simpler parameters as its operation declares them),
// keeps those that validate and are smaller, sorts them smallest first, and
// accepts the first that still fails. Rounds repeat until none is accepted: a
// fixed point. "Smaller" is (Scenario::size(), shrink_complexity()) in
// lexicographic order, which every accepted edit strictly lowers, so the
// shrinker always stops.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck {

// The tie-breaker after size: model widths, vocabulary, capacity, rows, the
// tokens held and their ids, the calls' counts, positions and deltas.
// Lower is simpler.
int64_t shrink_complexity(const Scenario& scenario);

// Every candidate one edit away, each validating and smaller than
// `scenario`, smallest first (ties keep generation order).
std::vector<Scenario> shrink_candidates(const Scenario& scenario);

// The failing verdict when the scenario still fails, nullopt when it does not.
using FailureCheck = std::function<std::optional<Verdict>(const Scenario&)>;

struct ShrinkOptions {
  int max_evaluations = 20000;
  double max_seconds = 600;
  // Called after each accepted candidate.
  std::function<void(const Scenario& accepted, int evaluations)> on_accept;
};

struct ShrinkResult {
  Scenario scenario;  // the smallest failing scenario found
  Verdict verdict;    // its failing verdict
  int size_before = 0, size_after = 0;
  int evaluations = 0;       // checks run
  int accepted = 0;          // candidates that still failed
  bool fixed_point = false;  // false when a limit stopped it first
  // The time limit stopped it (not the evaluations): where it stopped then
  // depends on the machine's speed, and the report says so.
  bool stopped_by_time = false;
};

// `failing` must fail (`verdict` is its failing verdict).
ShrinkResult shrink_scenario(const Scenario& failing, const Verdict& verdict,
                             const FailureCheck& still_fails, const ShrinkOptions& options = {});

// Shrinks while check_property(property, ., subject) fails (a candidate the
// engine's traits exclude is not applicable, so never accepted). Returns nullopt
// when `failing` does not fail to begin with.
std::optional<ShrinkResult> shrink_failure(const Scenario& failing, Property property,
                                           const EngineUnderTest& subject,
                                           const ShrinkOptions& options = {});

}  // namespace kvcheck
