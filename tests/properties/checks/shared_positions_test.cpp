// P6 and cells that share a position after a div (docs/OPERATIONS.md,
// "Div"): no call tells them apart, so an engine may list them in any
// order, and P6 pairs them by V. A snapshot listing them reversed, whole
// cells, holds; one whose cells of a shared position traded only their
// keys fails: the pairing permutes whole cells, it hides no wrong K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/in_tree.h"
#include "properties/property.h"
#include "tests/backends/wrapped_engine.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

// Swaps slots i and j of one [length][KVH][D] f32 buffer.
void swap_slots(std::vector<uint8_t>& data, int i, int j, size_t slot_bytes) {
  std::swap_ranges(data.begin() + std::ptrdiff_t(size_t(i) * slot_bytes),
                   data.begin() + std::ptrdiff_t(size_t(i + 1) * slot_bytes),
                   data.begin() + std::ptrdiff_t(size_t(j) * slot_bytes));
}

// The first two slots that share a position, or {-1, -1}.
std::pair<int, int> first_tie(const CacheSnapshot& snap) {
  for (int i = 0; i < int(snap.positions.size()); ++i) {
    for (int j = i + 1; j < int(snap.positions.size()); ++j) {
      if (snap.positions[size_t(i)] == snap.positions[size_t(j)]) return {i, j};
    }
  }
  return {-1, -1};
}

template <bool kKeysOnly>
class TradedTies final : public WrappedEngine {
 public:
  using WrappedEngine::WrappedEngine;
  CacheSnapshot cache(SequenceId sequence, int layer) const override {
    CacheSnapshot snap = inner_->cache(sequence, layer);
    const auto [i, j] = first_tie(snap);
    if (i < 0) return snap;
    const size_t slot_bytes = size_t(snap.n_kv_heads) * size_t(snap.head_dim) * sizeof(float);
    swap_slots(snap.k, i, j, slot_bytes);
    if (!kKeysOnly) swap_slots(snap.v, i, j, slot_bytes);
    return snap;
  }
};

TEST(SharedPositions, P6PairsWholeCellsOfOnePositionInAnyOrder) {
  Scenario s = div_scenario();
  s.sequences = {{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14}};  // every cell differs
  ASSERT_EQ(s.validate(), "");
  const EngineTraits traits = cpu_engine_traits_with_operations();
  const Verdict whole =
      check_property(Property::kCacheState, s,
                     EngineUnderTest(wrapping<TradedTies<false>>(cpu_engine_factory()), traits));
  EXPECT_TRUE(whole.applicable && whole.passed) << whole.summary;
  const Verdict keys =
      check_property(Property::kCacheState, s,
                     EngineUnderTest(wrapping<TradedTies<true>>(cpu_engine_factory()), traits));
  EXPECT_FALSE(keys.passed) << keys.summary;
  EXPECT_NE(keys.summary.find("cached K wrong"), std::string::npos) << keys.summary;
}

}  // namespace
}  // namespace kvcheck::test
