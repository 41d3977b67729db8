// Non-finite logits through exec: an engine in another process whose logits
// are all NaN (tests/tools/nan_engine.py) gives the same bits in every run,
// so a bitwise comparison alone would pass it; P2, P3 and P8 must fail it,
// naming the value and where it was (docs/PROPERTIES.md).
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

Backend nan_engine(const std::string& value) {
  return backend_registry().resolve(std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
                                    "/tests/tools/nan_engine.py " + KVCHECK_SOURCE_DIR +
                                    "/adapters/python --value " + value);
}

TEST(ExecNonFinite, AllNaNOrInfiniteLogitsFailChunkingBatchAndDeterminism) {
  const Scenario scenario = rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  for (const std::string value : {"nan", "inf"}) {
    const Backend backend = nan_engine(value);
    ASSERT_EQ(backend.traits.invariance.chunking, Invariance::kBitwise);
    const EngineUnderTest subject = backend.under_test();
    for (const Property p : {Property::kChunking, Property::kBatch, Property::kDeterminism}) {
      SCOPED_TRACE(std::string(property_label(p)) + " with logits " + value);
      const Verdict v = check_property(p, scenario, subject);
      ASSERT_TRUE(v.applicable) << describe(v);
      EXPECT_FALSE(v.passed) << describe(v);
      EXPECT_NE(v.summary.find("non-finite logit " + value), std::string::npos) << describe(v);
      // The first sequence compared, at its first position.
      EXPECT_EQ(v.where.sequence, 0) << describe(v);
      EXPECT_EQ(v.where.position, 0) << describe(v);
      EXPECT_EQ(v.where.call, 2) << describe(v);
    }
  }
}

}  // namespace
}  // namespace kvcheck::test
