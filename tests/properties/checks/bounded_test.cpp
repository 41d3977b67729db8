// Bounded invariance bites and is not vacuous: a 1-ulp chunking wobble fails
// P2 under bitwise traits and passes within the bound, while real position
// faults still fail P2 within the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "tests/backends/wrapped_engine.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

// A correct engine whose logits move up by one ulp for every token fed in a
// chunk of more than one: chunking-dependent, but far inside the bound.
class ChunkWobble final : public test::WrappedEngine {
 public:
  using WrappedEngine::WrappedEngine;
  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    inner_->step(batch, logits);
    const size_t vocab = size_t(config().vocab);
    size_t row = 0;
    for (const BatchEntry& b : batch) {
      for (size_t t = 0; t < b.tokens.size(); ++t, ++row) {
        if (b.tokens.size() < 2) continue;
        for (size_t v = 0; v < vocab; ++v) {
          float& x = logits[row * vocab + v];
          x = std::nextafter(x, std::numeric_limits<float>::infinity());
        }
      }
    }
  }
};

EngineTraits bounded_chunking() {
  EngineTraits t = cpu_engine_traits();
  t.invariance.chunking = Invariance::kBounded;
  return t;
}

// One prompt of 5 tokens in one chunk, then two decodes.
Scenario one_prompt(Family family) {
  Scenario s;
  s.config = test::small_config(family, 2, 4, 2);
  s.weight_seed = 3;
  s.capacity = 8;
  s.max_rows = 1;
  s.sequences = test::token_table(9, {7}, s.config.vocab);
  s.calls = {test::S(0), test::P({{0, 5}}), test::P({{0, 1}}), test::P({{0, 1}})};
  return s;
}

TEST(BoundedInvariance, AOneUlpChunkingWobbleFailsBitwiseAndPassesBounded) {
  const EngineFactory wobble = test::wrapping<ChunkWobble>(cpu_engine_factory());
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    const Scenario s = one_prompt(family);
    ASSERT_EQ(s.validate(), "");
    const Verdict bitwise =
        check_property(Property::kChunking, s, EngineUnderTest(wobble, cpu_engine_traits()));
    EXPECT_TRUE(bitwise.applicable);
    EXPECT_FALSE(bitwise.passed) << bitwise.summary;
    const Verdict bounded =
        check_property(Property::kChunking, s, EngineUnderTest(wobble, bounded_chunking()));
    EXPECT_TRUE(bounded.applicable);
    EXPECT_TRUE(bounded.passed) << test::describe(bounded);
    // The wobble is below what the oracle can see, too.
    EXPECT_TRUE(check_property(Property::kOracle, s, EngineUnderTest(wobble)).passed);
  }
}

TEST(BoundedInvariance, WeakenedViaTheBackendStringToo) {
  const Scenario s = one_prompt(Family::kLlama);
  const Backend bounded = backend_registry().resolve("cpu?invariance=bounded");
  EngineUnderTest subject(test::wrapping<ChunkWobble>(cpu_engine_factory()), bounded.traits);
  EXPECT_TRUE(check_property(Property::kChunking, s, subject).passed);
}

TEST(BoundedInvariance, PositionFaultsStillFailChunkingWithinTheBound) {
  const Backend bounded = backend_registry().resolve("cpu?invariance=bounded");
  for (Fault fault : {Fault::kRopeReapplied, Fault::kMaskTopLeft}) {
    SCOPED_TRACE(fault_name(fault));
    const EngineUnderTest faulty = bounded.under_test(FaultSet(fault));
    const Verdict v = check_property(Property::kChunking, one_prompt(Family::kLlama), faulty);
    EXPECT_TRUE(v.applicable);
    EXPECT_FALSE(v.passed) << test::describe(v);
    // ... and the correct engine passes the same check.
    EXPECT_TRUE(
        check_property(Property::kChunking, one_prompt(Family::kLlama), bounded.under_test())
            .passed);
  }
}

}  // namespace
}  // namespace kvcheck
