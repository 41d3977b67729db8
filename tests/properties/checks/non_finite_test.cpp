// A NaN or an infinity fails every property that compares logits, bitwise
// ones included (docs/PROPERTIES.md): an engine that returns the same NaN
// in every run gives equal bits in every run, and equal bits of NaN are not
// agreement. The rows a prefix hit reused are NaN by contract and stay
// exempt (EveryPropertyPassesOnThePrefixScenario in properties_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/in_tree.h"
#include "properties/runner.h"
#include "tests/backends/wrapped_engine.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The correct engine, but every logit of a token at absolute position
// `position` (every token when -1) is `value`, in every run alike. Rows a
// prefix hit reused keep the engine's own NaN.
class NonFiniteLogits final : public WrappedEngine {
 public:
  NonFiniteLogits(std::unique_ptr<Engine> inner, float value, int position)
      : WrappedEngine(std::move(inner)), value_(value), position_(position) {}

  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    std::vector<int> first(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) first[i] = inner_->length(batch[i].sequence);
    inner_->step(batch, logits);
    const size_t V = size_t(config().vocab);
    size_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int reused = inner_->reused(batch[i].sequence);
      for (size_t t = 0; t < batch[i].tokens.size(); ++t, ++row) {
        const int at = first[i] + static_cast<int>(t);
        if (static_cast<int>(t) < reused || (position_ >= 0 && at != position_)) continue;
        std::fill_n(logits.begin() + std::ptrdiff_t(row * V), V, value_);
      }
    }
  }

 private:
  float value_;
  int position_;
};

EngineUnderTest non_finite_subject(float value, int position = -1) {
  const EngineFactory inner = cpu_engine_factory();
  EngineUnderTest subject(
      [=](const Config& c, const Weights& w, const EngineOptions& o) {
        return std::unique_ptr<Engine>(
            std::make_unique<NonFiniteLogits>(inner(c, w, o), value, position));
      },
      cpu_engine_traits_with_operations());
  // P10's reference is the correct engine: its logits are finite.
  subject.reference = std::make_shared<const EngineUnderTest>(cpu_engine_factory(),
                                                              cpu_engine_traits_with_operations());
  return subject;
}

struct Comparison {
  std::vector<Property> properties;
  Scenario scenario;
};

// Each property that compares logits, on a scenario where it applies: the
// solo comparisons (P2 to P5), P7, P8, P9's others intact, P10, and the
// replays (P11, P12, P15). P1 fails too (its own non-finite check).
std::vector<Comparison> logit_families() {
  using P = Property;
  return {
      {{P::kOracle, P::kChunking, P::kBatch, P::kReset, P::kCompaction, P::kGqa, P::kDeterminism,
        P::kCapacity, P::kCrossEngine},
       rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32)},
      {{P::kSharing, P::kRollback}, operations_scenario(Family::kLlama, 3, KvDtype::kF32)},
      {{P::kPrefix}, prefix_scenario(Family::kLlama, 2, 0)},
  };
}

TEST(NonFinite, EveryPropertyThatComparesLogitsFailsOnNaNAndInfinity) {
  for (const float value : {kNaN, kInf, -kInf}) {
    const EngineUnderTest subject = non_finite_subject(value);
    const std::string printed = value != value ? "nan" : value > 0 ? "inf" : "-inf";
    for (const Comparison& family : logit_families()) {
      ASSERT_EQ(family.scenario.validate(), "");
      for (const Property p : family.properties) {
        SCOPED_TRACE(std::string(property_label(p)) + " with logits " + printed);
        const Verdict v = check_property(p, family.scenario, subject);
        ASSERT_TRUE(v.applicable) << describe(v);
        EXPECT_FALSE(v.passed) << describe(v);
        EXPECT_NE(v.summary.find("non-finite logit " + printed), std::string::npos) << describe(v);
        EXPECT_GE(v.where.call, 0) << describe(v);
        EXPECT_GE(v.where.sequence, 0) << describe(v);
        EXPECT_GE(v.where.position, 0) << describe(v);
      }
    }
  }
}

// One position poisoned in every run: the verdict names the call, the
// sequence and the position, and which run held the value.
TEST(NonFinite, TheVerdictSaysWhichValueAndWhere) {
  const Scenario scenario = rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  const SchedulePlan plan = plan_schedule(scenario);
  const Verdict v = check_property(Property::kDeterminism, scenario, non_finite_subject(kNaN, 4));
  ASSERT_FALSE(v.passed) << describe(v);
  // s0 is the first sequence fed past position 4 (7 tokens).
  EXPECT_EQ(v.where.sequence, 0);
  EXPECT_EQ(v.where.position, 4);
  EXPECT_EQ(v.where.call, plan.call_of_position[0][4]);
  EXPECT_NE(v.summary.find("s0 position 4: non-finite logit nan in the first run (call " +
                           std::to_string(plan.call_of_position[0][4]) + ")"),
            std::string::npos)
      << describe(v);
  EXPECT_NE(v.detail.find("0x7fc00000"), std::string::npos) << v.detail;
}

// A fork inherits its parent's first positions: no call of the child fed
// them, and a truncated child's replay holds them too. A NaN there is the
// replay's, and the verdict has no call to name.
TEST(NonFinite, APositionAForkInheritedFailsWithoutACall) {
  Scenario s;
  s.config = small_config(Family::kLlama, 2, 2, 2);
  s.weight_seed = 3;
  s.capacity = 8;
  s.max_rows = 2;
  s.sequences = token_table(9, {4, 5}, s.config.vocab);
  // s1 inherits s0's positions 0..2, is fed 2, loses 1 and is fed 1 more.
  s.calls = {S(0), P({{0, 4}}), Fk(1, 0, 3), P({{1, 2}}), T(1, 1), P({{1, 1}})};
  ASSERT_EQ(s.validate(), "");
  const Verdict v = check_property(Property::kRollback, s, non_finite_subject(kNaN, 0));
  ASSERT_FALSE(v.passed) << describe(v);
  EXPECT_EQ(v.where.sequence, 1);
  EXPECT_EQ(v.where.position, 0);
  EXPECT_EQ(v.where.call, -1);
  EXPECT_NE(v.summary.find("s1 position 0: non-finite logit nan in a replay that never fed the "
                           "forgotten tokens"),
            std::string::npos)
      << describe(v);
  EXPECT_EQ(v.summary.find("(call"), std::string::npos) << describe(v);
}

// The correct engine, but one K element of the newest cached slot of every
// snapshot is `value`.
class NonFiniteCache final : public WrappedEngine {
 public:
  NonFiniteCache(std::unique_ptr<Engine> inner, float value)
      : WrappedEngine(std::move(inner)), value_(value) {}

  CacheSnapshot cache(SequenceId sequence, int layer) const override {
    CacheSnapshot snap = inner_->cache(sequence, layer);
    const size_t slot = size_t(snap.n_kv_heads) * size_t(snap.head_dim) * sizeof(float);
    if (snap.dtype == KvDtype::kF32 && snap.length > 0) {
      std::memcpy(snap.k.data() + size_t(snap.length - 1) * slot, &value_, sizeof(float));
    }
    return snap;
  }

 private:
  float value_;
};

// P6 compares K/V with the oracle: a NaN or an infinity in a held slot,
// where the oracle is finite, fails at the first call that shows it.
TEST(NonFinite, CachedNonFiniteKFailsCacheState) {
  const Scenario scenario = rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  for (const float value : {kNaN, kInf}) {
    const EngineFactory inner = cpu_engine_factory();
    const EngineFactory factory = [=](const Config& c, const Weights& w, const EngineOptions& o) {
      return std::unique_ptr<Engine>(std::make_unique<NonFiniteCache>(inner(c, w, o), value));
    };
    const Verdict v = check_property(Property::kCacheState, scenario,
                                     EngineUnderTest(factory, cpu_engine_traits_with_operations()));
    ASSERT_FALSE(v.passed) << describe(v);
    // Call 2 feeds s0 its first 3 tokens: slot 2 of layer 0, KV head 0.
    EXPECT_EQ(v.where.call, 2);
    EXPECT_EQ(v.where.sequence, 0);
    EXPECT_EQ(v.where.layer, 0);
    EXPECT_EQ(v.where.kv_head, 0);
    EXPECT_EQ(v.where.position, 2);
    EXPECT_TRUE(std::isinf(v.worst_ratio)) << describe(v);
    EXPECT_NE(v.detail.find("non-finite"), std::string::npos) << v.detail;
  }
}

}  // namespace
}  // namespace kvcheck::test
