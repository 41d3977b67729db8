// The P1 error map of a failing case for the HTML report: the case re-run
// on its engine and on the oracle, |engine logit - oracle logit| / B per
// sequence and position (rows) and vocabulary slice (columns), so that a
// wrong sequence, position range or slice of the vocabulary shows as a stripe.
#pragma once

#include <string>
#include <vector>

#include "properties/property.h"

namespace kvcheck::cli {

struct ErrorMap {
  std::string title;                       // what was compared; empty: no map
  std::vector<std::string> row_labels;     // [row] "pos 3"
  std::vector<std::string> col_labels;     // [col] "v 0..7"
  std::vector<std::vector<double>> ratio;  // [row][col] worst error/bound (inf: not finite)
};

// Slices of at most kMaxColumns columns: wider vocabularies are binned and
// each cell holds its slice's worst ratio. Empty (no title) when the
// property is not P1 or the engine threw before producing any logits.
inline constexpr int kMaxErrorMapColumns = 32;
ErrorMap p1_error_map(const Scenario& scenario, const Verdict& verdict,
                      const EngineUnderTest& subject);

}  // namespace kvcheck::cli
