// P3 batch: a sequence alone gives the same logits as inside a ragged
// batch (the scenario's shared steps) and in a later row behind decoding
// dummies: bitwise, or within 2B where batching is declared bounded.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "properties/common/against_solo.h"
#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// Keeps this property's random choices apart from the others'.
constexpr uint64_t kDummySalt = 0x64756d6d79746f6bull;  // "dummytok"

}  // namespace

Verdict check_batch(const Context& context) {
  Verdict verdict = start_verdict(Property::kBatch);
  const size_t n = context.scenario.sequences.size();
  const int dummies = std::min(context.scenario.max_rows - 1, 2);
  std::vector<bool> shared = context.plan.shared_step;
  std::vector<bool> fed(n);
  for (size_t s = 0; s < n; ++s) fed[s] = context.plan.fed[s] > 0 && context.plan.plain[s];
  const int n_shared = count_fed(context, shared);
  int n_placed = dummies > 0 ? count_fed(context, fed) : 0;
  if (n_shared == 0 && n_placed == 0) {
    return not_applicable(Property::kBatch,
                          "no sequence shares a step and max_rows 1 leaves no other row");
  }
  if (n_shared > 0) {
    const RunResult run = scenario_run(context);
    if (run.engine_failed) return engine_refused(Property::kBatch, run, "the scenario");
    if (!scenario_matches_solo(verdict, context, run, shared, "sharing its steps")) return verdict;
  }
  for (size_t s = 0; s < n && dummies > 0; ++s) {
    if (!fed[s]) continue;
    const int sequence = static_cast<int>(s);
    const std::span<const int32_t> tokens = fed_tokens(context, sequence);
    const SoloRun alone = run_solo(context, tokens, context.plan.chunks[s]);
    const SoloRun placed =
        run_solo(context, tokens, context.plan.chunks[s], dummies, context.digest ^ kDummySalt ^ s);
    for (const SoloRun* r : {&alone, &placed}) {
      if (r->run.engine_failed) {
        return engine_refused(Property::kBatch, r->run, "a solo run of s" + std::to_string(s));
      }
    }
    if (alone.pool_ran_dry() || placed.pool_ran_dry()) {
      --n_placed;
      continue;
    }
    if (!same_logits(verdict, context, sequence, alone.logits, "its solo run in row 0",
                     placed.logits,
                     "a run behind " + std::to_string(dummies) +
                         " decoding dummy sequences (later row and batch slot)")) {
      return verdict;
    }
  }
  if (n_shared == 0 && n_placed == 0) {
    return not_applicable(Property::kBatch, "every re-placed run ran the pool dry");
  }
  pass(verdict, std::to_string(n_shared) + " batched and " + std::to_string(n_placed) +
                    " re-placed sequences");
  return verdict;
}

}  // namespace kvcheck::checks
