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
                       const ArithmeticTraits& arithmetic, const std::vector<float>& got, int seq,
                       int fed, int per_col) {
  const int V = s.config.vocab;
  const std::span<const int32_t> tokens =
      std::span<const int32_t>(s.sequences[size_t(seq)]).first(size_t(fed));
  const oracle::Output want = oracle::forward(s.config, weights, tokens);
  const ErrorBounds bounds = derive_error_bounds(s.config, weights, tokens, s.kv_dtype, arithmetic);
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

// Column labels of `count` items in slices of `per_col`.
std::vector<std::string> slice_labels(int count, int per_col) {
  std::vector<std::string> labels;
  for (int first = 0; first < count; first += per_col) {
    const int last = std::min(count, first + per_col) - 1;
    labels.push_back(per_col == 1 ? std::to_string(first)
                                  : std::to_string(first) + ".." + std::to_string(last));
  }
  return labels;
}

// One P6 map (kind 0: K, 1: V): rows are layers, a cell the worst ratio over
// its positions, heads and dimensions; a slot the snapshot lacks or holds
// non-finite counts as infinite.
ErrorMap cache_map(int kind, const Scenario& s, const oracle::Output& want,
                   const ErrorBounds& bounds, const std::vector<CacheSnapshot>& snaps, int length,
                   int sequence, int call) {
  const Config& c = s.config;
  const int T = want.n_tokens, KVH = c.n_kv_heads, D = c.head_dim;
  const int per_col = (length + kMaxErrorMapColumns - 1) / kMaxErrorMapColumns;
  ErrorMap map;
  map.col_axis = "position";
  map.col_labels = slice_labels(length, per_col);
  for (int l = 0; l < c.n_layers; ++l) {
    const CacheSnapshot& snap = snaps[size_t(l)];
    map.row_labels.push_back("layer " + std::to_string(l));
    std::vector<double> row(map.col_labels.size(), 0.0);
    // A windowed layer's ring lists the positions it holds; those before
    // them left the window and are not compared.
    const int first_held = snap.positions.empty() ? 0 : snap.positions.front();
    for (int pos = 0; pos < length && pos < T; ++pos) {
      double& cell = row[size_t(pos / per_col)];
      if (pos < first_held) continue;
      const int index = pos - first_held;
      if (index >= snap.length || snap.n_kv_heads != KVH || snap.head_dim != D) {
        cell = INFINITY;
        continue;
      }
      for (int g = 0; g < KVH; ++g) {
        for (int d = 0; d < D; ++d) {
          const size_t at =
              ((size_t(l) * size_t(T) + size_t(pos)) * size_t(KVH) + size_t(g)) * size_t(D) +
              size_t(d);
          const double got = kind == 0 ? snap.k_at(index, g, d) : snap.v_at(index, g, d);
          const double ratio = std::abs(got - (kind == 0 ? want.k[at] : want.v[at])) /
                               (kind == 0 ? bounds.k[at] : bounds.v[at]);
          cell = std::max(cell, std::isfinite(ratio) ? ratio : INFINITY);
        }
      }
    }
    map.ratio.push_back(std::move(row));
  }
  map.title = std::string("P6 error map of cached ") + (kind == 0 ? "K" : "V") + ": s" +
              std::to_string(sequence) + " after call " + std::to_string(call) +
              ", |cached - oracle| / bound per layer and " +
              (per_col == 1 ? "position" : "position range (the worst of the range)");
  return map;
}

}  // namespace

std::vector<ErrorMap> p6_error_maps(const Scenario& s, const Verdict& verdict,
                                    const EngineUnderTest& subject) {
  const Location& where = verdict.where;
  if (verdict.property != Property::kCacheState || where.call < 0 || where.sequence < 0 ||
      !subject.traits.operations.cache_snapshot) {
    return {};
  }
  const std::shared_ptr<const Weights> model_weights = scenario_weights(s);
  const Weights& weights = *model_weights;
  const SchedulePlan plan = plan_schedule(s);
  const int fed = plan.fed[size_t(where.sequence)];
  if (fed <= 0) return {};
  const std::span<const int32_t> tokens =
      std::span<const int32_t>(s.sequences[size_t(where.sequence)]).first(size_t(fed));
  std::vector<CacheSnapshot> snaps;  // [layer] at the failing call
  int length = 0;
  const CallHook hook = [&](int call, const ScenarioRunner& runner) {
    if (call < where.call) return true;
    if (!runner.running(where.sequence)) return false;
    length = runner.fed(where.sequence);
    for (int l = 0; l < s.config.n_layers; ++l) {
      snaps.push_back(runner.engine().cache(runner.id(where.sequence), l));
    }
    return false;
  };
  try {
    run_scenario(s, weights, subject.factory, hook);
  } catch (...) {
    return {};  // the verdict's text already says what the engine threw
  }
  if (snaps.empty() || length == 0) return {};
  const oracle::Output want = oracle::forward(s.config, weights, tokens);
  const ErrorBounds bounds =
      derive_error_bounds(s.config, weights, tokens, s.kv_dtype, subject.traits.arithmetic);
  return {cache_map(0, s, want, bounds, snaps, length, where.sequence, where.call),
          cache_map(1, s, want, bounds, snaps, length, where.sequence, where.call)};
}

std::vector<ErrorMap> error_maps(const Scenario& s, const Verdict& verdict,
                                 const EngineUnderTest& subject) {
  if (verdict.property == Property::kCacheState) return p6_error_maps(s, verdict, subject);
  ErrorMap map = p1_error_map(s, verdict, subject);
  if (map.title.empty()) return {};
  return {std::move(map)};
}

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
  map.col_labels = slice_labels(V, per_col);
  const SchedulePlan plan = plan_schedule(s);
  for (size_t seq = 0; seq < s.sequences.size() && seq < run.logits.size(); ++seq) {
    const int fed = plan.fed[seq];
    if (fed > 0) {
      add_sequence_rows(map, s, weights, subject.traits.arithmetic, run.logits[seq], int(seq), fed,
                        per_col);
    }
  }
  if (map.ratio.empty()) return map;
  map.title = std::string("P1 error map: |engine - oracle| / bound per sequence, position and ") +
              (per_col == 1 ? "vocabulary index" : "vocabulary slice (the worst of the slice)");
  return map;
}

}  // namespace kvcheck::cli
