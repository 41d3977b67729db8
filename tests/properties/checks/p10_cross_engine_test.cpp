// P10 against the in-tree reference engine on a forked child. P10's 2B bound
// is derived from a sequence's stream; a forked child's logits follow its
// content (the parent's prefix, then its own tokens), so comparing them
// against the stream's bound failed the correct engines here (found by the
// conformance suite, cpu.P10_cross_engine, kvcheck-failures/ case of
// 2026-12-01). P10 now leaves non-plain sequences to P1, P11 and P12.
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "properties/property.h"

namespace kvcheck {
namespace {

Scenario forked_child_scenario() {
  Scenario s;
  s.config.family = Family::kLlama;
  s.config.n_layers = 3, s.config.d_model = 4, s.config.n_heads = 1, s.config.n_kv_heads = 1;
  s.config.head_dim = 4, s.config.d_ff = 5, s.config.vocab = 33, s.config.max_pos = 9;
  s.weight_seed = 597;
  s.capacity = 9, s.max_rows = 3;
  s.sequences = {{20, 27, 19, 22}, {24}, {11, 23, 31, 6}};
  s.calls = {Call::start(0),      Call::start(1),       Call::step({{0, 4}, {1, 1}}),
             Call::fork(2, 0, 4), Call::step({{2, 2}}), Call::step({{2, 1}}),
             Call::step({{2, 1}})};
  return s;
}

TEST(CrossEngine, AForkedChildIsLeftToTheContentChecks) {
  EngineUnderTest cpu = backend_registry().resolve("cpu").under_test();
  cpu.reference =
      std::make_shared<EngineUnderTest>(backend_registry().resolve("cpu-reference").under_test());
  const Scenario s = forked_child_scenario();
  ASSERT_EQ(s.validate(), "");
  const Verdict p10 = check_property(Property::kCrossEngine, s, cpu);
  EXPECT_TRUE(p10.applicable && p10.passed) << p10.summary;
  EXPECT_NE(p10.summary.find("2 sequences within 2B"), std::string::npos) << p10.summary;
  // The child is checked where its content is known: against the oracle.
  const Verdict p1 = check_property(Property::kOracle, s, cpu);
  EXPECT_TRUE(p1.applicable && p1.passed) << p1.summary;
}

}  // namespace
}  // namespace kvcheck
