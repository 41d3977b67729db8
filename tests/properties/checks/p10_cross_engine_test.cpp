// P10 against the in-tree reference engine on a forked child. P10's 2B bound
// is derived from a sequence's stream; a forked child's logits follow its
// content (the parent's prefix, then its own tokens), so comparing them
// against the stream's bound failed the correct engines here (found by the
// conformance suite, cpu.P10_cross_engine, kvcheck-failures/ case of
// 2026-12-01). P10 now leaves non-plain sequences to P1, P11 and P12.
// And P10's bound is B + B_ref, each side's from its own declared
// arithmetic (an f32 engine against llama.cpp's f16 flash attention).
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
  EXPECT_NE(p10.summary.find("2 sequences within B + B_ref"), std::string::npos) << p10.summary;
  // The child is checked where its content is known: against the oracle.
  const Verdict p1 = check_property(Property::kOracle, s, cpu);
  EXPECT_TRUE(p1.applicable && p1.passed) << p1.summary;
}

EngineUnderTest against(const std::string& subject, const std::string& reference) {
  EngineUnderTest engine = backend_registry().resolve(subject).under_test();
  engine.reference =
      std::make_shared<EngineUnderTest>(backend_registry().resolve(reference).under_test());
  return engine;
}

// The two kernel paths differ in their last bits; with one side declaring
// ggml's f16 flash attention the bound is B_f32 + B_flash whichever side
// declares it (2 B of the subject's arithmetic gave 2 B_flash one way and
// 2 B_f32 the other, the latter too tight for a reference that computes
// in f16), and wider than 2 B_f32.
TEST(CrossEngine, TheBoundIsEachSidesOwnArithmetic) {
  Scenario s = forked_child_scenario();
  s.calls.resize(3);  // two plain sequences, fed together
  ASSERT_EQ(s.validate(), "");
  const auto p10 = [&](const std::string& subject, const std::string& reference) {
    const Verdict v = check_property(Property::kCrossEngine, s, against(subject, reference));
    EXPECT_TRUE(v.applicable && v.passed) << v.summary;
    return v.worst_ratio;
  };
  const double f32 = p10("cpu", "cpu-reference");
  const double subject_flash = p10("cpu?arithmetic=ggml-flash-f16", "cpu-reference");
  const double reference_flash = p10("cpu", "cpu-reference?arithmetic=ggml-flash-f16");
  ASSERT_GT(f32, 0.0) << "the kernel paths agree bitwise here: no ratio to compare";
  EXPECT_DOUBLE_EQ(subject_flash, reference_flash);
  EXPECT_LT(reference_flash, f32);
}

}  // namespace
}  // namespace kvcheck
