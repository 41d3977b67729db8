#include "tools/error_map.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "model/weights.h"
#include "oracle/oracle.h"
#include "properties/runner.h"
#include "properties/tolerance.h"

namespace kvcheck::cli {

namespace {

// Rows "sN pos t" of one sequence: the worst error/bound of each slice.
void add_sequence_rows(ErrorMap& map, const Scenario& s, const Weights& weights,
                       const std::vector<float>& got, int seq, int fed, int per_col) {
  const int V = s.config.vocab;
  const std::span<const int32_t> tokens =
      std::span<const int32_t>(s.sequences[size_t(seq)]).first(size_t(fed));
  const oracle::Output want = oracle::forward(s.config, weights, tokens);
  const ErrorBounds bounds = derive_error_bounds(s.config, weights, tokens, s.kv_dtype);
  const int positions = std::min(fed, int(got.size() / size_t(V)));
  const size_t cols = map.col_labels.size();
  for (int t = 0; t < positions; ++t) {
    map.row_labels.push_back("s" + std::to_string(seq) + " pos " + std::to_string(t));
    std::vector<double> row(cols, 0.0);
    for (int v = 0; v < V; ++v) {
      const size_t i = size_t(t) * size_t(V) + size_t(v);
      const double ratio =
          std::abs(double(got[i]) - want.logits[i]) / bounds.logits[i];  // NaN when not finite
      double& cell = row[size_t(v / per_col)];
      cell = std::max(cell, std::isfinite(ratio) ? ratio : INFINITY);
    }
    map.ratio.push_back(std::move(row));
  }
}

}  // namespace

ErrorMap p1_error_map(const Scenario& s, const Verdict& verdict, const EngineUnderTest& subject) {
  ErrorMap map;
  const int V = s.config.vocab;
  if (verdict.property != Property::kOracle || V <= 0) return map;
  const std::shared_ptr<const Weights> model_weights = scenario_weights(s);
  const Weights& weights = *model_weights;
  RunResult run;
  try {
    run = run_scenario(s, weights, subject.factory);
  } catch (...) {
    return map;  // the verdict's text already says what the engine threw
  }
  const int per_col = (V + kMaxErrorMapColumns - 1) / kMaxErrorMapColumns;
  for (int first = 0; first < V; first += per_col) {
    const int last = std::min(V, first + per_col) - 1;
    map.col_labels.push_back(per_col == 1 ? std::to_string(first)
                                          : std::to_string(first) + ".." + std::to_string(last));
  }
  const SchedulePlan plan = plan_schedule(s);
  for (size_t seq = 0; seq < s.sequences.size() && seq < run.logits.size(); ++seq) {
    const int fed = plan.fed[seq];
    if (fed > 0) add_sequence_rows(map, s, weights, run.logits[seq], int(seq), fed, per_col);
  }
  if (map.ratio.empty()) return map;
  map.title = std::string("P1 error map: |engine - oracle| / bound per sequence, position and ") +
              (per_col == 1 ? "vocabulary index" : "vocabulary slice (the worst of the slice)");
  return map;
}

}  // namespace kvcheck::cli
