// P10 cross_engine: the scenario on a reference engine (--reference) gives
// logits within B + B_ref of the subject's, each bound derived from its own
// engine's declared arithmetic. Catches what both engines' own invariances
// cannot: a fault that is self-consistent.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

// The engine keeps within B of the exact logits and the reference within
// B_ref (each meets the per-kernel error model of the arithmetic it
// declares: llama.cpp's f16 flash attention against the in-tree f32 engine),
// so by the triangle inequality they are within B + B_ref of each other,
// whatever their reduction orders; 2 B where both declare the same.
Verdict check_cross_engine(const Context& context) {
  Verdict verdict = start_verdict(Property::kCrossEngine);
  const EngineUnderTest* reference = context.subject.reference.get();
  if (reference == nullptr) {
    return not_applicable(Property::kCrossEngine, "no reference engine given (--reference)");
  }
  if (const std::string why = traits_exclude(reference->traits, context.scenario); !why.empty()) {
    return not_applicable(Property::kCrossEngine, "the reference engine lacks " + why);
  }
  const RunResult run = scenario_run(context);
  if (run.engine_failed) return engine_refused(Property::kCrossEngine, run, "the scenario");
  const RunResult other = run_scenario(context.scenario, context.weights, reference->factory);
  if (other.engine_failed) {
    return engine_refused(Property::kCrossEngine, other, "the scenario on the reference engine");
  }
  int compared = 0;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    // The 2B bound is derived from the stream, which is the content only for
    // a plain sequence; a forked or truncated one is P1's, P11's and P12's.
    if (context.plan.fed[s] == 0 || !context.plan.plain[s]) continue;
    ++compared;
    const std::span<const int32_t> tokens = fed_tokens(context, static_cast<int>(s));
    std::vector<float> mine = run.logits[s], theirs = other.logits[s];  // [stream index][V]
    const std::vector<bool> skipped = reused_in_either(run, other, s);
    skip_rows(mine, skipped, size_t(context.vocab));
    skip_rows(theirs, skipped, size_t(context.vocab));
    const std::optional<size_t> at =
        first_difference(context, Invariance::kBounded, tokens, theirs, mine, &verdict.worst_ratio,
                         &reference->traits.arithmetic);
    if (!at) continue;
    const size_t V = size_t(context.vocab);
    Location where;
    where.sequence = static_cast<int>(s);
    where.position = static_cast<int>(*at / V);
    where.call = context.plan.call_of_position[s][size_t(where.position)];
    std::ostringstream detail;
    detail << "s" << s << " position " << where.position << " vocab " << *at % V << "\n";
    if (*at < other.logits[s].size() && *at < run.logits[s].size()) {
      detail << "  reference (" << reference->backend
             << "): " << float_with_bits(other.logits[s][*at])
             << "\n  engine: " << float_with_bits(run.logits[s][*at]) << "\n";
    }
    fail(verdict, where,
         "s" + std::to_string(s) + " position " + std::to_string(where.position) + ": " +
             disagreement(theirs, "the reference engine", mine, "the engine", *at, where.call,
                          "logits differ from the reference engine by more than B + B_ref"),
         detail.str());
    return verdict;
  }
  if (compared == 0) return not_applicable(Property::kCrossEngine, "no plain sequence is fed");
  pass(verdict, std::to_string(compared) + " sequences within B + B_ref of " + reference->backend +
                    ", worst |difference|/(B + B_ref) " + format_double(verdict.worst_ratio));
  return verdict;
}

}  // namespace kvcheck::checks
