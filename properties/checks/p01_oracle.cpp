// P1 oracle: every logit the engine computes matches the oracle's within
// the derived bound B (docs/TOLERANCE.md). The one property that compares
// with the exact model; every other compares the engine with itself.
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/reference.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

using References = std::vector<std::vector<std::shared_ptr<const SequenceReference>>>;

// [s][segment] the reference of each segment of each fed sequence; null
// for a segment that fed nothing.
References segment_references(const Context& context) {
  References references(context.scenario.sequences.size());
  for (size_t s = 0; s < references.size(); ++s) {
    if (context.plan.fed[s] == 0) continue;
    for (const Segment& segment : context.plan.segments[s]) {
      references[s].push_back(segment.fed.empty() ? nullptr : reference_for(context, segment));
    }
  }
  return references;
}

struct Finding {
  int call = -1, sequence = -1, position = -1, vocab_index = -1;
  double engine = 0, oracle = 0, bound = 0, ratio = 0;
  bool non_finite = false;
};

// What the scan of every fed logit found: the earliest non-finite logit and
// the earliest over the bound (by call, one candidate per sequence), the
// worst ratio, and a line per sequence for the detail.
struct Scan {
  std::optional<Finding> first_non_finite, first_over;
  Finding worst;
  std::ostringstream per_sequence;
};

bool earlier(const std::optional<Finding>& current, const Finding& candidate) {
  return !current || candidate.call < current->call;
}

// Checks sequence s's fed logits, each token against the oracle of what the
// sequence held then: its segment's content (a fork child's starts with the
// parent's prefix; a truncation opens a new segment). docs/OPERATIONS.md.
void scan_sequence(const Context& context, const RunResult& run, size_t s,
                   const std::vector<std::shared_ptr<const SequenceReference>>& references,
                   Scan& scan) {
  const size_t V = size_t(context.scenario.config.vocab);
  const std::vector<float>& logits = run.logits[s];  // [stream index][V]
  Finding sequence_worst;
  bool sequence_non_finite = false, sequence_over = false;
  for (size_t g = 0; g < context.plan.segments[s].size(); ++g) {
    const Segment& segment = context.plan.segments[s][g];
    if (segment.fed.empty()) continue;
    const oracle::Output& reference = references[g]->oracle;
    const ErrorBounds& bounds = references[g]->bounds;
    for (const auto& [k, position] : segment.fed) {
      if (reused_at(run, s, size_t(k))) continue;  // a prefix hit: not computed
      for (size_t j = 0; j < V; ++j) {
        const size_t i = size_t(k) * V + j, at = size_t(position) * V + j;
        const double engine = logits[i], exact = reference.logits[at], bound = bounds.logits[at];
        const double ratio = std::abs(engine - exact) / bound;
        const bool non_finite = !std::isfinite(engine);
        // A NaN ratio (a broken bound) must fail, never pass silently.
        const bool over = !(ratio <= 1.0);
        if (!non_finite && !over && ratio <= sequence_worst.ratio) continue;
        Finding f{context.plan.call_of_position[s][size_t(k)],
                  static_cast<int>(s),
                  position,
                  static_cast<int>(j),
                  engine,
                  exact,
                  bound,
                  non_finite || std::isnan(ratio) ? INFINITY : ratio,
                  non_finite};
        if (non_finite && !sequence_non_finite) {
          sequence_non_finite = true;
          if (earlier(scan.first_non_finite, f)) scan.first_non_finite = f;
        } else if (!non_finite && over && !sequence_over) {
          sequence_over = true;
          if (earlier(scan.first_over, f)) scan.first_over = f;
        }
        if (f.ratio > sequence_worst.ratio || sequence_worst.sequence < 0) sequence_worst = f;
      }
    }
  }
  scan.per_sequence << "  s" << s << ": " << context.plan.fed[s] << " positions, worst error/bound "
                    << format_double(sequence_worst.ratio) << " at position "
                    << sequence_worst.position << " vocab " << sequence_worst.vocab_index << "\n";
  if (sequence_worst.ratio > scan.worst.ratio || scan.worst.sequence < 0) {
    scan.worst = sequence_worst;
  }
}

void fail_at(Verdict& verdict, const Finding& f, const Scan& scan) {
  Location where;
  where.call = f.call;
  where.sequence = f.sequence;
  where.position = f.position;
  std::ostringstream detail;
  detail << "first failing logit: s" << f.sequence << " position " << f.position << " vocab "
         << f.vocab_index << " (fed by call " << f.call << ")\n"
         << "  engine " << format_double(f.engine) << "  oracle " << format_double(f.oracle)
         << "  |error| " << format_double(std::abs(f.engine - f.oracle)) << "  bound "
         << format_double(f.bound) << "  error/bound " << format_double(f.ratio) << "\n"
         << "per sequence:\n"
         << scan.per_sequence.str();
  fail(verdict, where,
       f.non_finite ? "s" + std::to_string(f.sequence) + " position " + std::to_string(f.position) +
                          ": non-finite logit " + format_double(f.engine)
                    : "s" + std::to_string(f.sequence) + " position " + std::to_string(f.position) +
                          ": error/bound " + format_double(f.ratio) + " > 1",
       detail.str());
}

}  // namespace

Verdict check_oracle(const Context& context) {
  Verdict verdict = start_verdict(Property::kOracle);
  // The references are computed while an engine in another process works on
  // the steps sent without waiting: the two overlap instead of taking turns.
  References references;
  const auto compute_references = [&] { references = segment_references(context); };
  const RunResult run = scenario_run(context, compute_references);
  if (run.engine_failed) return engine_refused(Property::kOracle, run, "the scenario");
  if (references.empty()) compute_references();

  Scan scan;
  bool any = false;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    if (context.plan.fed[s] == 0) continue;
    any = true;
    scan_sequence(context, run, s, references[s], scan);
  }
  if (!any) return not_applicable(Property::kOracle, "no sequence is fed");
  verdict.worst_ratio = scan.worst.ratio;

  const std::optional<Finding>& failure =
      scan.first_non_finite ? scan.first_non_finite : scan.first_over;
  if (!failure) {
    pass(verdict, "worst error/bound " + format_double(scan.worst.ratio));
    verdict.detail = scan.per_sequence.str();
    return verdict;
  }
  fail_at(verdict, *failure, scan);
  return verdict;
}

}  // namespace kvcheck::checks
