// The logits comparisons (logits.h says why they are shared).
#include "properties/common/logits.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "properties/common/reference.h"
#include "properties/common/verdicts.h"
#include "properties/property_table.h"

namespace kvcheck::checks {

namespace {

// Index of the first logit where |a - b| > B_a + B (B the derived bound of
// the sequence's tokens under the subject's arithmetic, B_a under a's, 2 B
// when a's is the subject's), or where either side is not finite; the
// triangle inequality through the exact logit makes B_a + B the bound for
// two runs that keep within B_a and B. Sizes must match, else min size.
std::optional<size_t> first_bound_violation(const Context& context,
                                            std::span<const int32_t> all_tokens,
                                            std::span<const float> a, std::span<const float> b,
                                            double* worst_ratio,
                                            const ArithmeticTraits* a_arithmetic) {
  const size_t n = std::min(a.size(), b.size());
  if (n == 0) return a.size() == b.size() ? std::nullopt : std::optional<size_t>(0);
  const size_t positions = n / size_t(context.vocab);
  const std::span<const int32_t> tokens = all_tokens.first(positions);
  const std::shared_ptr<const SequenceReference> reference = reference_for(context, tokens);
  const std::shared_ptr<const SequenceReference> a_reference =
      a_arithmetic ? reference_for(context, tokens, *a_arithmetic) : reference;
  for (size_t i = 0; i < n; ++i) {
    const double bound = reference->bounds.logits[i] + a_reference->bounds.logits[i];
    const double ratio = std::abs(double(a[i]) - double(b[i])) / bound;
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]) || !(ratio <= 1.0)) return i;
    *worst_ratio = std::max(*worst_ratio, ratio);
  }
  if (a.size() != b.size()) return n;
  return std::nullopt;
}

}  // namespace

std::optional<size_t> first_difference(const Context& context, Invariance invariance,
                                       std::span<const int32_t> tokens, std::span<const float> a,
                                       std::span<const float> b, double* worst_ratio,
                                       const ArithmeticTraits* a_arithmetic) {
  const std::optional<size_t> differ =
      invariance == Invariance::kBitwise
          ? first_bit_difference(a, b)
          : first_bound_violation(context, tokens, a, b, worst_ratio, a_arithmetic);
  const size_t end = std::min({differ.value_or(a.size()), a.size(), b.size()});
  for (size_t i = 0; i < end; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return i;
  }
  return differ;
}

std::string disagreement(std::span<const float> a, const std::string& a_name,
                         std::span<const float> b, const std::string& b_name, size_t at, int call,
                         const std::string& differ) {
  for (const auto& [values, name] : {std::pair{a, &a_name}, std::pair{b, &b_name}}) {
    if (at < values.size() && !std::isfinite(values[at])) {
      return "non-finite logit " + format_double(values[at]) + " in " + *name +
             (call >= 0 ? " (call " + std::to_string(call) + ")" : std::string());
    }
  }
  return differ;
}

void skip_rows(std::vector<float>& logits, const std::vector<bool>& skipped, size_t V) {
  for (size_t k = 0; k < skipped.size() && (k + 1) * V <= logits.size(); ++k) {
    if (skipped[k]) std::fill_n(logits.begin() + std::ptrdiff_t(k * V), V, 0.0f);
  }
}

bool reused_at(const RunResult& run, size_t s, size_t k) {
  return s < run.reused.size() && k < run.reused[s].size() && run.reused[s][k];
}

std::vector<bool> reused_in_either(const RunResult& a, const RunResult& b, size_t s) {
  std::vector<bool> out = s < a.reused.size() ? a.reused[s] : std::vector<bool>();
  if (s < b.reused.size()) {
    out.resize(std::max(out.size(), b.reused[s].size()), false);
    for (size_t k = 0; k < b.reused[s].size(); ++k) out[k] = out[k] || b.reused[s][k];
  }
  return out;
}

bool same_logits(Verdict& verdict, const Context& context, int sequence,
                 const std::vector<float>& expected_in, const std::string& expected_name,
                 const std::vector<float>& got_in, const std::string& got_name,
                 const std::vector<bool>& skipped) {
  const Invariance invariance = invariance_for(context, verdict.property);
  const bool bitwise = invariance == Invariance::kBitwise;
  // The bound is derived from the stream's tokens, which are a forked or
  // truncated sequence's content only where it is plain; P1, P11 and P12
  // check those within their own bounds.
  if (!bitwise && !context.plan.plain[size_t(sequence)]) return true;
  std::vector<float> expected_copy, got_copy;
  const bool skips = std::find(skipped.begin(), skipped.end(), true) != skipped.end();
  if (skips) {
    expected_copy = expected_in, got_copy = got_in;
    skip_rows(expected_copy, skipped, size_t(context.vocab));
    skip_rows(got_copy, skipped, size_t(context.vocab));
  }
  const std::vector<float>& expected = skips ? expected_copy : expected_in;
  const std::vector<float>& got = skips ? got_copy : got_in;
  const std::optional<size_t> at =
      first_difference(context, invariance, context.scenario.sequences[size_t(sequence)], expected,
                       got, &verdict.worst_ratio);
  if (!at) return true;
  const size_t V = size_t(context.vocab);
  const int position = static_cast<int>(*at / V);
  const int vocab_index = static_cast<int>(*at % V);
  Location where;
  where.sequence = sequence;
  where.position = position;
  const std::vector<int>& calls = context.plan.call_of_position[size_t(sequence)];
  where.call = position < static_cast<int>(calls.size()) ? calls[size_t(position)] : -1;
  std::ostringstream detail;
  detail << "sequence s" << sequence << ", position " << position << ", vocab index " << vocab_index
         << " (fed by call " << where.call << ")\n";
  if (*at < expected.size() && *at < got.size()) {
    detail << "  " << expected_name << ": " << float_with_bits(expected[*at]) << "\n";
    detail << "  " << got_name << ": " << float_with_bits(got[*at]) << "\n";
  } else {
    detail << "  " << expected_name << " has " << expected.size() / V << " positions, " << got_name
           << " has " << got.size() / V << "\n";
  }
  if (!bitwise) detail << "  (compared within 2B: the engine declares this invariance bounded)\n";
  fail(verdict, where,
       "s" + std::to_string(sequence) + " position " + std::to_string(position) + ": " +
           disagreement(expected, expected_name, got, got_name, *at, where.call,
                        std::string("logits ") + (bitwise ? "differ" : "differ by more than 2B") +
                            " between " + expected_name + " and " + got_name),
       detail.str());
  return false;
}

Invariance invariance_for(const Context& context, Property property) {
  return property_row(property).invariance(context.subject.traits);
}

}  // namespace kvcheck::checks
