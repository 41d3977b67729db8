#include "tests/gpu/cross_engine.h"

#include <cmath>
#include <sstream>

#include "model/weights.h"
#include "properties/runner.h"
#include "properties/tolerance.h"

namespace kvcheck {

Verdict check_cross_engine(const Scenario& scenario, const EngineFactory& engine,
                           const EngineFactory& reference) {
  Verdict verdict;
  verdict.property = Property::kOracle;
  if (const std::string why = scenario.validate(); !why.empty()) {
    verdict.applicable = false;
    verdict.summary = "P10 not applicable: " + why;
    return verdict;
  }
  const Weights weights = init_weights(scenario.config, scenario.weight_seed);
  const RunResult a = run_scenario(scenario, weights, engine);
  const RunResult b = run_scenario(scenario, weights, reference);
  if (a.engine_failed || b.engine_failed) {
    verdict.passed = false;
    verdict.summary = "P10: an engine refused a valid call: " +
                      (a.engine_failed ? a.error_message : b.error_message);
    return verdict;
  }
  const size_t V = size_t(scenario.config.vocab);
  bool any = false;
  for (size_t s = 0; s < scenario.sequences.size(); ++s) {
    const size_t fed = std::min(a.logits[s].size(), b.logits[s].size()) / V;
    if (fed == 0) continue;
    any = true;
    const std::span<const int32_t> tokens =
        std::span<const int32_t>(scenario.sequences[s]).first(fed);
    const ErrorBounds bounds =
        derive_error_bounds(scenario.config, weights, tokens, scenario.kv_dtype);
    for (size_t i = 0; i < fed * V; ++i) {
      const double x = a.logits[s][i], y = b.logits[s][i];
      const double ratio = std::abs(x - y) / (2.0 * bounds.logits[i]);
      if (std::isfinite(x) && std::isfinite(y) && ratio <= 1.0) {
        verdict.worst_ratio = std::max(verdict.worst_ratio, ratio);
        continue;
      }
      verdict.passed = false;
      verdict.where.sequence = static_cast<int>(s);
      verdict.where.position = static_cast<int>(i / V);
      std::ostringstream out;
      out << "P10: s" << s << " position " << i / V << " vocab " << i % V << ": engine "
          << float_with_bits(float(x)) << " vs reference " << float_with_bits(float(y))
          << ", |difference| / (2 bound) = " << ratio;
      verdict.summary = out.str();
      return verdict;
    }
  }
  if (!any) {
    verdict.applicable = false;
    verdict.summary = "P10 not applicable: no sequence is fed";
    return verdict;
  }
  std::ostringstream out;
  out << "P10 passed: worst |difference| / (2 bound) " << verdict.worst_ratio;
  verdict.summary = out.str();
  return verdict;
}

}  // namespace kvcheck
