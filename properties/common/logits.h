// How two runs' logits are compared: bit for bit, or within 2B (B the
// derived bound of the sequence's tokens) where the engine declares an
// invariance bounded; what a disagreement is called; and the rows a prefix
// hit reused, which no comparison reads. Every property but P1 compares
// logits this one way, so it lives apart from them.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/traits.h"
#include "properties/common/context.h"

namespace kvcheck::checks {

// The comparison of logits every property but P1 makes: the index of the
// first logit where a and b disagree, bit for bit or within 2 B as the
// engine declares. A NaN or infinity on either side disagrees whatever the
// invariance: equal NaN bits are not agreement, or an engine whose logits
// are all NaN would pass every bitwise comparison. (Rows a prefix hit
// reused are NaN by contract; callers zero them first, skip_rows.)
// `a_arithmetic`: the arithmetic a's engine declares where it is not the
// subject's (P10's reference engine); the bound is then B_a + B, each
// derived from its own side's arithmetic, instead of 2 B.
std::optional<size_t> first_difference(const Context& context, Invariance invariance,
                                       std::span<const int32_t> tokens, std::span<const float> a,
                                       std::span<const float> b, double* worst_ratio,
                                       const ArithmeticTraits* a_arithmetic = nullptr);

// What a failed comparison found at `at`, for the summary: the side that
// holds a non-finite logit, its value and the verdict's call, else `differ`.
std::string disagreement(std::span<const float> a, const std::string& a_name,
                         std::span<const float> b, const std::string& b_name, size_t at, int call,
                         const std::string& differ);

// A prefix hit leaves the logits of the tokens it reused uncomputed (NaN,
// RunResult::reused); comparisons skip those rows by zeroing them on both
// sides. Their K/V are still checked (P6), and so is every later token that
// reads them.
void skip_rows(std::vector<float>& logits, const std::vector<bool>& skipped, size_t V);

bool reused_at(const RunResult& run, size_t s, size_t k);

// Rows reused in either of two runs of one sequence.
std::vector<bool> reused_in_either(const RunResult& a, const RunResult& b, size_t s);

// Compares two runs of one sequence, bit for bit or within 2 B as the engine
// declares for this property. On a difference, fills the verdict with the
// first differing logit, located at the scenario call that fed that position.
bool same_logits(Verdict& verdict, const Context& context, int sequence,
                 const std::vector<float>& expected_in, const std::string& expected_name,
                 const std::vector<float>& got_in, const std::string& got_name,
                 const std::vector<bool>& skipped = {});

// What the engine promises for the comparison `property` makes (its row's
// invariance, property_table.h).
Invariance invariance_for(const Context& context, Property property);

}  // namespace kvcheck::checks
