// The oracle references the properties compare against (P1, P6, and the
// 2B bound of the bounded comparisons), and the per-thread cache that keeps
// recomputing them off the hot path. Apart from the properties because
// several read them and none owns them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "oracle/oracle.h"
#include "properties/common/context.h"
#include "properties/tolerance.h"

namespace kvcheck::checks {

// ---- Caches of what depends on the model alone --------------------------
//
// Callers check several properties on one scenario in a row (check_all runs
// every property; RapidCheck's shrinking re-checks scenarios that differ in one
// gene), and the weights (scenario_weights) and each sequence's oracle
// reference are pure functions of (config, weight seed or checkpoint[, KV
// dtype, tokens]) that the engine never touches. Both caches are per thread,
// hold only the most recent model, are bounded, and return exactly what a fresh computation
// returns, so no verdict depends on them; they only skip recomputing it.

// What P1 and P6 compare against, for one sequence's fed tokens.
struct SequenceReference {
  oracle::Output oracle;
  ErrorBounds bounds;
  // A history reference (erase, shift): the position each cell holds,
  // [cell]; empty for a plain one (cell i holds position i).
  std::vector<int32_t> positions;
};

// The reference of a sequence's tokens (cached, see above).
std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       std::span<const int32_t> tokens);

// The same with the bound derived for another declared arithmetic (P10's
// reference engine's): a cache of its own, so that alternating with the
// subject's arithmetic empties neither.
std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       std::span<const int32_t> tokens,
                                                       const ArithmeticTraits& arithmetic);

// The reference of one segment: the oracle of its content, or for a
// sequence with an erase or shift the replay of its history
// (docs/ORACLE.md, "Context shift"): oracle rows per feed, K/V per cell.
std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       const Segment& segment);

}  // namespace kvcheck::checks
