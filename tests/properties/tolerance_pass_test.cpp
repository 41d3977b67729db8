// The tolerance's one forward pass (properties/tolerance_pass.cpp) held to
// the oracle and to itself: its value track is oracle::forward bit for bit,
// and a history of feeds alone (with truncations, no erase or shift) gets
// derive_error_bounds' bounds bit for bit. Either failing means the bounds
// were propagated along values other than the reference's, or that the two
// entry points modelled one cache differently.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arithmetic_presets.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

// Bit for bit: operator== on doubles would let -0.0 pass for 0.0.
::testing::AssertionResult same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure()
           << "sizes " << a.size() << " and " << b.size() << " differ";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i]
                                           << " (difference " << a[i] - b[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Shape {
  Family family;
  int heads, kv_heads, window;
};

const Shape kShapes[] = {
    {Family::kGpt2, 4, 4, 0},  {Family::kGpt2, 4, 2, 0},  {Family::kGpt2, 4, 1, 3},
    {Family::kLlama, 4, 4, 0}, {Family::kLlama, 4, 2, 0}, {Family::kLlama, 4, 1, 0},
    {Family::kLlama, 4, 2, 3},
};

std::string name(const Shape& s, KvDtype dtype, const ArithmeticPreset& arithmetic) {
  return std::string(family_name(s.family)) + " heads " + std::to_string(s.heads) + "/" +
         std::to_string(s.kv_heads) + " window " + std::to_string(s.window) + " " +
         kv_dtype_name(dtype) + " arithmetic " + arithmetic.name;
}

TEST(TolerancePass, ValueTrackIsTheOracleBitForBit) {
  for (const Shape& s : kShapes) {
    Config config = small_config(s.family, 2, s.heads, s.kv_heads);
    config.sliding_window = s.window;
    ASSERT_EQ(config.validate(), "");
    const Weights weights = init_weights(config, 17);
    const std::vector<int32_t> tokens = token_table(23, {13}, config.vocab)[0];
    const oracle::Output reference = oracle::forward(config, weights, tokens);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kQ8_0}) {
      for (const ArithmeticPreset& arithmetic : arithmetic_presets()) {
        SCOPED_TRACE(name(s, dtype, arithmetic));
        oracle::Output track;
        derive_error_bounds(config, weights, tokens, dtype, arithmetic.arithmetic, &track);
        EXPECT_EQ(track.n_tokens, reference.n_tokens);
        EXPECT_TRUE(same_bits(track.logits, reference.logits));
        EXPECT_TRUE(same_bits(track.k, reference.k));
        EXPECT_TRUE(same_bits(track.v, reference.v));
      }
    }
  }
}

// The bounds of the first n rows of `all` ([rows][width] per block).
std::vector<double> rows(const std::vector<double>& all, int blocks, int n_rows, int first, int n) {
  const size_t width = all.size() / size_t(blocks) / size_t(n_rows);
  std::vector<double> out;
  for (int b = 0; b < blocks; ++b) {
    const auto begin = all.begin() + std::ptrdiff_t((size_t(b) * n_rows + first) * width);
    out.insert(out.end(), begin, begin + std::ptrdiff_t(size_t(n) * width));
  }
  return out;
}

void expect_same_bounds(const HistoryBounds& history, const ErrorBounds& bounds) {
  EXPECT_TRUE(same_bits(history.k, bounds.k));
  EXPECT_TRUE(same_bits(history.v, bounds.v));
  EXPECT_TRUE(same_bits(history.k_computed, bounds.k_computed));
  EXPECT_TRUE(same_bits(history.v_computed, bounds.v_computed));
}

TEST(TolerancePass, HistoryOfFeedsIsTheErrorBoundsBitForBit) {
  using oracle::Event;
  for (const Shape& s : kShapes) {
    if (s.family != Family::kLlama || s.window != 0) continue;  // a history is llama, unwindowed
    const Config config = small_config(s.family, 2, s.heads, s.kv_heads);
    const Weights weights = init_weights(config, 19);
    const std::vector<int32_t> tokens = token_table(29, {11}, config.vocab)[0];
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (const ArithmeticPreset& arithmetic : arithmetic_presets()) {
        SCOPED_TRACE(name(s, dtype, arithmetic));
        const ErrorBounds bounds =
            derive_error_bounds(config, weights, tokens, dtype, arithmetic.arithmetic);
        std::vector<Event> feeds;
        for (int32_t t : tokens) feeds.push_back(Event::feed(t));
        const HistoryBounds fed =
            derive_history_bounds(config, weights, feeds, dtype, arithmetic.arithmetic);
        EXPECT_TRUE(same_bits(fed.logits, bounds.logits));
        expect_same_bounds(fed, bounds);

        // Truncate 4 of 11, feed the last 4 again: the cells are the tokens
        // again; the logits of the refed tokens are rows 7..10.
        std::vector<Event> refed = feeds;
        refed.push_back(Event::truncate(4));
        for (size_t i = 7; i < tokens.size(); ++i) refed.push_back(Event::feed(tokens[i]));
        const HistoryBounds again =
            derive_history_bounds(config, weights, refed, dtype, arithmetic.arithmetic);
        const int V = config.vocab;
        EXPECT_TRUE(same_bits(rows(again.logits, 1, 15, 11, 4), rows(bounds.logits, 1, 11, 7, 4)));
        EXPECT_TRUE(same_bits(rows(again.logits, 1, 15, 0, 11), bounds.logits));
        EXPECT_EQ(again.logits.size(), size_t(15 * V));
        expect_same_bounds(again, bounds);
      }
    }
  }
}

}  // namespace
}  // namespace kvcheck::test
