// The correct engine passes every property on hand-made scenarios, on both
// kernel paths and every KV dtype: a property that flags the correct engine
// is as broken as one that misses a fault.
#include <gtest/gtest.h>

#include "backends/in_tree.h"
#include "engine/arithmetic_presets.h"
#include "properties/runner.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

struct HeadShape {
  Family family;
  int heads, kv_heads;
};

TEST(Properties, CorrectEnginePassesEveryPropertyOnTheRichScenario) {
  const HeadShape shapes[] = {{Family::kGpt2, 4, 4},
                              {Family::kGpt2, 4, 2},
                              {Family::kLlama, 4, 2},
                              {Family::kLlama, 4, 1},
                              {Family::kLlama, 4, 4}};
  for (const HeadShape& shape : shapes) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
      for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
        const Scenario scenario = rich_scenario(shape.family, shape.heads, shape.kv_heads, dtype);
        ASSERT_EQ(scenario.validate(), "");
        // P10 compares each kernel path with the other.
        const KernelPath other =
            path == KernelPath::kReference ? KernelPath::kOptimized : KernelPath::kReference;
        EngineUnderTest subject(cpu_engine_factory(FaultSet(), path),
                                cpu_engine_traits_with_operations(path));
        subject.reference = std::make_shared<const EngineUnderTest>(
            cpu_engine_factory(FaultSet(), other), cpu_engine_traits_with_operations(other));
        for (int i = 0; i < kPropertyCount; ++i) {
          const Property p = static_cast<Property>(i);
          const Verdict v = check_property(p, scenario, subject);
          const bool mha = shape.heads == shape.kv_heads;
          SCOPED_TRACE(std::string(family_name(shape.family)) + " " + std::to_string(shape.heads) +
                       "/" + std::to_string(shape.kv_heads) + " " + kv_dtype_name(dtype) +
                       (path == KernelPath::kReference ? " reference" : " optimized"));
          EXPECT_TRUE(v.passed) << describe(v);
          EXPECT_EQ(v.property, p);
          // The rich scenario has no fork, truncation, paged storage or prefix cache.
          const bool operation = p == Property::kSharing || p == Property::kRollback ||
                                 p == Property::kPool || p == Property::kPrefix;
          EXPECT_EQ(v.applicable, !(p == Property::kGqa && mha) && !operation) << describe(v);
          if (p == Property::kOracle || p == Property::kCacheState || p == Property::kCrossEngine) {
            EXPECT_GT(v.worst_ratio, 0.0);
            EXPECT_LT(v.worst_ratio, 1.0);
          }
        }
      }
    }
  }
}

// The rich scenario (resets, finishes with compaction, ragged batches, chunks
// at capacity) with windows of 2 and 5 in the even layers and every layer:
// every property holds on both kernel paths, P10 comparing them.
TEST(Properties, EveryPropertyPassesOnTheRichScenarioWithSlidingWindows) {
  for (const auto& [window, pattern] : {std::pair{2, 2}, std::pair{5, 0}}) {
    for (Family family : {Family::kGpt2, Family::kLlama}) {
      Scenario scenario = rich_scenario(family, 4, 2, KvDtype::kBF16);
      scenario.config.sliding_window = window;
      scenario.config.sliding_window_pattern = pattern;
      ASSERT_EQ(scenario.validate(), "");
      EngineUnderTest subject(cpu_engine_factory(FaultSet(), KernelPath::kOptimized),
                              cpu_engine_traits_with_operations(KernelPath::kOptimized));
      subject.reference = std::make_shared<const EngineUnderTest>(
          cpu_engine_factory(FaultSet(), KernelPath::kReference),
          cpu_engine_traits_with_operations(KernelPath::kReference));
      for (int i = 0; i < kPropertyCount; ++i) {
        const Verdict v = check_property(static_cast<Property>(i), scenario, subject);
        SCOPED_TRACE(std::string(family_name(family)) + " W=" + std::to_string(window));
        EXPECT_TRUE(v.passed) << describe(v);
      }
    }
  }
}

// An engine that does not declare windows gets a windowed scenario as not
// applicable, naming the window; one that does gets a window combined with
// fork or truncate as not applicable too (no engine combines them).
TEST(Properties, WindowsAreNotApplicableWhereTheEngineLacksThem) {
  Scenario scenario = rich_scenario(Family::kGpt2, 4, 2, KvDtype::kF32);
  scenario.config.sliding_window = 3;
  const Verdict lacking = check_property(
      Property::kOracle, scenario, EngineUnderTest(cpu_engine_factory(), cpu_engine_traits()));
  EXPECT_FALSE(lacking.applicable);
  EXPECT_NE(lacking.summary.find("the engine lacks sliding_window 3 (sliding windows)"),
            std::string::npos)
      << lacking.summary;
  Scenario forked = operations_scenario(Family::kGpt2, 0, KvDtype::kF32);
  forked.config.sliding_window = 3;
  const Verdict combined =
      check_property(Property::kOracle, forked,
                     EngineUnderTest(cpu_engine_factory(), cpu_engine_traits_with_operations()));
  EXPECT_FALSE(combined.applicable);
  EXPECT_NE(combined.summary.find("with a sliding window"), std::string::npos) << combined.summary;
}

TEST(Properties, EveryPropertyPassesOnThePrefixScenario) {
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    for (int block : {1, 2, 3}) {
      const Scenario scenario = prefix_scenario(family, block, 0);
      ASSERT_EQ(scenario.validate(), "");
      const EngineUnderTest subject(cpu_engine_factory(), cpu_engine_traits_with_operations());
      for (int i = 0; i < kPropertyCount; ++i) {
        const Property p = static_cast<Property>(i);
        const Verdict v = check_property(p, scenario, subject);
        SCOPED_TRACE(std::string(family_name(family)) + " block " + std::to_string(block));
        EXPECT_TRUE(v.passed) << describe(v);
        // P15 applies only where a hit happened: s1 and s2 share s0's prefix.
        if (p == Property::kPrefix || p == Property::kPool || p == Property::kPoison ||
            p == Property::kOracle || p == Property::kCacheState) {
          EXPECT_TRUE(v.applicable) << describe(v);
        }
      }
      // Without the prefix cache declared, the scenario is not applicable.
      const Verdict strict = check_property(Property::kOracle, scenario, cpu_engine_factory());
      EXPECT_FALSE(strict.applicable);
    }
  }
}

TEST(Properties, APoolRefusalStopsTheCheckThereAndMustChangeNothing) {
  // A pool of 8 blocks of 1: when s2 joins s1 (7 blocks held, 1 cached),
  // the step needs 2 new blocks. The correct engine refuses it, changing
  // nothing, and the calls before it are checked. The fault that keeps half
  // a table fails.
  const Scenario scenario = prefix_scenario(Family::kGpt2, 1, 8);
  ASSERT_EQ(scenario.validate(), "");
  const Verdict correct =
      check_property(Property::kOracle, scenario,
                     EngineUnderTest(cpu_engine_factory(), cpu_engine_traits_with_operations()));
  EXPECT_TRUE(correct.passed) << describe(correct);
  EXPECT_TRUE(correct.applicable);
  EXPECT_NE(correct.summary.find("the pool ran dry and refused a step"), std::string::npos)
      << correct.summary;
  const RunResult run = run_scenario(scenario, *scenario_weights(scenario), cpu_engine_factory());
  EXPECT_TRUE(run.refused);
  EXPECT_EQ(run.refused_call, 7);
  const Verdict faulty =
      check_property(Property::kPool, scenario,
                     EngineUnderTest(cpu_engine_factory(FaultSet(Fault::kRefusalLeavesHalfTable)),
                                     cpu_engine_traits_with_operations()));
  EXPECT_FALSE(faulty.passed);
  EXPECT_NE(faulty.detail.find("changed the engine's state"), std::string::npos) << faulty.detail;
}

TEST(Properties, APoolProbeIsTheRunThePropertyChecks) {
  // A scenario whose pool may run dry is run once to learn whether it is
  // refused. That run is then the property's own first run, or, when a step
  // was refused, the run of the calls before it: P1 builds one engine either
  // way (its run is the probe), and a fault in those calls still fails.
  int engines = 0;
  const EngineFactory counting = [&](const Config& config, const Weights& weights,
                                     const EngineOptions& options) {
    ++engines;
    return cpu_engine_factory()(config, weights, options);
  };
  const EngineUnderTest subject(counting, cpu_engine_traits_with_operations());
  const Scenario refused = prefix_scenario(Family::kGpt2, 1, 8);
  const Verdict stopped = check_property(Property::kOracle, refused, subject);
  EXPECT_TRUE(stopped.passed && stopped.applicable) << describe(stopped);
  EXPECT_NE(stopped.summary.find("the pool ran dry"), std::string::npos) << stopped.summary;
  EXPECT_EQ(engines, 1);
  engines = 0;
  const Scenario roomy = prefix_scenario(Family::kGpt2, 1, 30);
  ASSERT_EQ(roomy.validate(), "");
  const Verdict whole = check_property(Property::kOracle, roomy, subject);
  EXPECT_TRUE(whole.passed && whole.applicable) << describe(whole);
  EXPECT_EQ(whole.summary.find("the pool ran dry"), std::string::npos) << whole.summary;
  EXPECT_EQ(engines, 1);
  // P8 runs the scenario twice: the probe is the first of the two.
  for (const Scenario* scenario : {&refused, &roomy}) {
    engines = 0;
    const Verdict twice = check_property(Property::kDeterminism, *scenario, subject);
    EXPECT_TRUE(twice.passed && twice.applicable) << describe(twice);
    EXPECT_EQ(engines, 2);
  }
  for (const Scenario* scenario : {&refused, &roomy}) {
    const Verdict caught =
        check_property(Property::kOracle, *scenario,
                       EngineUnderTest(cpu_engine_factory(FaultSet(Fault::kDecodePositionZero)),
                                       cpu_engine_traits_with_operations()));
    EXPECT_FALSE(caught.passed) << describe(caught);
    EXPECT_EQ(caught.where.call, 2) << describe(caught);
  }
}

TEST(Properties, EveryPropertyPassesOnTheOperationsScenario) {
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    for (int block : {0, 1, 3, 4}) {
      for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
        const Scenario scenario = operations_scenario(family, block, dtype);
        ASSERT_EQ(scenario.validate(), "");
        const EngineUnderTest subject(cpu_engine_factory(), cpu_engine_traits_with_operations());
        for (int i = 0; i < kPropertyCount; ++i) {
          const Property p = static_cast<Property>(i);
          const Verdict v = check_property(p, scenario, subject);
          SCOPED_TRACE(std::string(family_name(family)) + " block " + std::to_string(block) + " " +
                       kv_dtype_name(dtype));
          EXPECT_TRUE(v.passed) << describe(v);
          // MHA (no P7), no reference (no P10), and only forked or
          // truncated sequences run across the finish (P5 takes plain ones).
          const bool expected = p != Property::kGqa && p != Property::kCrossEngine &&
                                p != Property::kCompaction && p != Property::kPrefix &&
                                !(p == Property::kPool && block == 0);
          EXPECT_EQ(v.applicable, expected) << describe(v);
        }
        // Without the operations declared, the scenario is not applicable.
        const Verdict strict = check_property(Property::kOracle, scenario, cpu_engine_factory());
        EXPECT_FALSE(strict.applicable);
        EXPECT_NE(strict.summary.find("lacks"), std::string::npos) << strict.summary;
      }
    }
  }
}

TEST(Properties, InvalidScenarioIsNotApplicableAndNamesTheProblem) {
  Scenario s = rich_scenario(Family::kGpt2, 4, 4, KvDtype::kF32);
  s.calls.insert(s.calls.begin(), P({{0, 1}}));
  const Verdict v = check_property(Property::kOracle, s, cpu_engine_factory());
  EXPECT_FALSE(v.applicable);
  EXPECT_TRUE(v.passed);
  EXPECT_NE(v.summary.find("call 0: step feeds sequence 0 which is not running"), std::string::npos)
      << v.summary;
}

TEST(Properties, NotApplicableWhereThereIsNothingToCheck) {
  // One sequence, one token, one row: nothing is chunked, batched, reset,
  // compacted, and the model is MHA.
  Scenario s;
  s.config = small_config(Family::kGpt2, 1, 2, 2);
  s.capacity = 4;
  s.max_rows = 1;
  s.sequences = token_table(1, {1}, s.config.vocab);
  s.calls = {S(0), P({{0, 1}})};
  const EngineFactory factory = cpu_engine_factory();
  for (Property p : {Property::kChunking, Property::kBatch, Property::kReset, Property::kCompaction,
                     Property::kGqa}) {
    const Verdict v = check_property(p, s, factory);
    EXPECT_FALSE(v.applicable) << describe(v);
    EXPECT_TRUE(v.passed);
  }
  for (Property p :
       {Property::kOracle, Property::kCacheState, Property::kDeterminism, Property::kCapacity}) {
    const Verdict v = check_property(p, s, factory);
    EXPECT_TRUE(v.applicable) << describe(v);
    EXPECT_TRUE(v.passed) << describe(v);
  }
}

TEST(Properties, CapacityProbesWithACompanionAndAFreshProbeSequence) {
  Scenario s;
  s.config = small_config(Family::kLlama, 1, 2, 1);
  s.capacity = 6;
  s.max_rows = 2;
  s.sequences = token_table(9, {6, 3, 2}, s.config.vocab);
  s.calls = {S(0), S(1), P({{0, 4}, {1, 2}}), P({{0, 2}})};  // s0 at capacity, s1 has room
  Verdict v = check_property(Property::kCapacity, s, cpu_engine_factory());
  EXPECT_TRUE(v.passed) << describe(v);
  EXPECT_NE(v.summary.find("2 refusals, 1 sequences continued"), std::string::npos) << v.summary;
  // Nothing running at the end: a fresh probe sequence is refused capacity+1.
  s.calls.push_back(R());
  v = check_property(Property::kCapacity, s, cpu_engine_factory());
  EXPECT_TRUE(v.passed) << describe(v);
  EXPECT_NE(v.summary.find("1 refusals, 1 sequences continued"), std::string::npos) << v.summary;
}

// P9's "others intact" comparison uses the bound where the batch promise is
// bounded, under a reduced-precision arithmetic too (llama.cpp's f16 flash
// attention), and the refusals are checked either way.
TEST(Properties, CapacityUnderABoundedBatchComparesAndChecksTheRefusals) {
  Scenario s;
  s.config = small_config(Family::kLlama, 1, 2, 1);
  s.capacity = 6;
  s.max_rows = 2;
  s.sequences = token_table(9, {6, 3, 2}, s.config.vocab);
  s.calls = {S(0), S(1), P({{0, 4}, {1, 2}}), P({{0, 2}})};
  EngineTraits traits = cpu_engine_traits();
  traits.invariance.batch = Invariance::kBounded;
  Verdict v = check_property(Property::kCapacity, s, EngineUnderTest(cpu_engine_factory(), traits));
  EXPECT_TRUE(v.passed) << describe(v);
  traits.arithmetic = *find_arithmetic_preset("ggml-flash-f16");
  v = check_property(Property::kCapacity, s, EngineUnderTest(cpu_engine_factory(), traits));
  EXPECT_TRUE(v.passed && v.applicable) << describe(v);
  // The refusals are still checked: an engine that does not refuse fails.
  v = check_property(Property::kCapacity, s,
                     EngineUnderTest(cpu_engine_factory(FaultSet(Fault::kCapacityWraps)), traits));
  EXPECT_FALSE(v.passed) << describe(v);
}

TEST(Properties, NamesAndLabelsRoundTrip) {
  for (int i = 0; i < kPropertyCount; ++i) {
    const Property p = static_cast<Property>(i);
    EXPECT_EQ(parse_property(property_name(p)), p);
    EXPECT_EQ(parse_property(property_label(p)), p);
    EXPECT_EQ(property_label(p), "P" + std::to_string(i + 1));
  }
  EXPECT_EQ(property_name(Property::kCacheState), "cache_state");
  EXPECT_EQ(parse_property("no_such_property"), std::nullopt);
}

}  // namespace
}  // namespace kvcheck::test
