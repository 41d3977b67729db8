// The error maps of a failing case for the HTML report: the case re-run on
// its engine and on the oracle, |engine - oracle| / bound
//  - P1: per sequence and position (rows) and vocabulary slice (columns);
//  - P6: per layer (rows) and position (columns), one map for K and one for
//    V, of the failing sequence's cache after the failing call;
// so that a wrong sequence, layer, position range or slice shows as a stripe.
#pragma once

#include <string>
#include <vector>

#include "properties/property.h"

namespace kvcheck::cli {

struct ErrorMap {
  std::string title;                       // what was compared; empty: no map
  std::vector<std::string> row_labels;     // [row] "pos 3"
  std::vector<std::string> col_labels;     // [col] "0..7"
  std::string col_axis = "vocab";          // what a column is, for the tooltips
  std::vector<std::vector<double>> ratio;  // [row][col] worst error/bound (inf: not finite)
};

// Slices of at most kMaxColumns columns: wider vocabularies are binned and
// each cell holds its slice's worst ratio. Empty (no title) when the
// property is not P1 or the engine threw before producing any logits.
inline constexpr int kMaxErrorMapColumns = 32;
ErrorMap p1_error_map(const Scenario& scenario, const Verdict& verdict,
                      const EngineUnderTest& subject);

// The K and V maps of a P6 failure (positions binned to kMaxErrorMapColumns
// like the vocabulary); empty for other properties, for an engine without
// cache snapshots, or when the failing call cannot be reached again.
std::vector<ErrorMap> p6_error_maps(const Scenario& scenario, const Verdict& verdict,
                                    const EngineUnderTest& subject);

// Every error map the verdict's property has: P1's or P6's, else none.
std::vector<ErrorMap> error_maps(const Scenario& scenario, const Verdict& verdict,
                                 const EngineUnderTest& subject);

}  // namespace kvcheck::cli
