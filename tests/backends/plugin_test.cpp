// The CPU engine behind the C plugin ABI against the same engine in-tree:
// same traits (but fault switches), same verdicts, same logits bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "engine/traits_json.h"
#include "model/weights.h"
#include "properties/runner.h"
#include "tests/property_units/test_scenarios.h"

namespace kvcheck {
namespace {

const std::string kCpuPlugin = std::string("plugin:") + KVCHECK_CPU_PLUGIN;

std::vector<Scenario> hand_made_scenarios() {
  std::vector<Scenario> out = {
      test::rich_scenario(Family::kGpt2, 2, 2, KvDtype::kF32),
      test::rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32),
      test::rich_scenario(Family::kLlama, 4, 1, KvDtype::kBF16),
      test::rich_scenario(Family::kGpt2, 2, 2, KvDtype::kF16),
  };
  out.push_back(test::minimal_fault_scenario(Fault::kMaskTopLeft));
  // Forks mid-sequence and at the end, truncations to 0 and across refeeds
  // (contiguous storage: the ABI carries no paged storage).
  out.push_back(test::operations_scenario(Family::kLlama, 0, KvDtype::kF32));
  out.push_back(test::operations_scenario(Family::kGpt2, 0, KvDtype::kBF16));
  return out;
}

// The in-tree engine as the ABI carries it: the core calls, fork and truncate.
EngineTraits plugin_traits() {
  EngineTraits t = cpu_engine_traits();
  t.operations.fork = t.operations.truncate = true;
  return t;
}

TEST(CpuPlugin, ResolvesWithTheInTreeTraitsButFaultSwitches) {
  const Backend plugin = backend_registry().resolve(kCpuPlugin);
  EngineTraits expected = plugin_traits();
  expected.identity.name = "kvcheck-cpu-plugin";
  expected.operations.fault_switches = false;
  EXPECT_EQ(traits_to_json(plugin.traits), traits_to_json(expected));
  EXPECT_EQ(plugin.spec, kCpuPlugin);
  EXPECT_FALSE(plugin.weakened);

  const Result<EngineTraits> again = traits_from_json(traits_to_json(plugin.traits));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(traits_to_json(again.value()), traits_to_json(plugin.traits));
}

TEST(CpuPlugin, EveryPropertyGivesTheInTreeVerdict) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  const EngineUnderTest cpu(cpu_engine_factory(), plugin_traits());
  int applicable = 0, operations_checked = 0;
  for (const Scenario& s : hand_made_scenarios()) {
    ASSERT_EQ(s.validate(), "");
    for (int p = 0; p < kPropertyCount; ++p) {
      const Verdict a = check_property(Property(p), s, plugin);
      const Verdict b = check_property(Property(p), s, cpu);
      SCOPED_TRACE(std::string(property_label(Property(p))) + " on\n" + s.to_text());
      EXPECT_EQ(a.passed, b.passed) << test::describe(a) << "\nvs\n" << test::describe(b);
      EXPECT_EQ(a.applicable, b.applicable) << a.summary << " vs " << b.summary;
      EXPECT_EQ(a.worst_ratio, b.worst_ratio);
      EXPECT_EQ(a.summary, b.summary);
      applicable += a.applicable && a.passed;
      if (Property(p) == Property::kSharing || Property(p) == Property::kRollback)
        operations_checked += a.applicable && a.passed;
    }
  }
  // P10 has no reference here and P13-P14 need paged storage, which the ABI
  // does not carry; each other property checks something on most scenarios,
  // and P11 and P12 both check the two operations scenarios.
  EXPECT_GE(applicable, 7 * (kPropertyCount - 5) - 7);
  EXPECT_EQ(operations_checked, 4);
}

// A fault that lives in truncate, switched on inside the plugin (the ABI
// carries no fault switches): the rollback property catches it through the
// plugin path as it does in-tree, with the same summary.
TEST(CpuPlugin, TruncateFaultsAreCaughtThroughTheAbi) {
  for (const Fault f : {Fault::kTruncateNoop, Fault::kTruncateKeepsPosition}) {
    const std::string spec = kCpuPlugin + "?fault=" + std::string(fault_name(f));
    const EngineUnderTest plugin = backend_registry().resolve(spec).under_test();
    const EngineUnderTest cpu(cpu_engine_factory(FaultSet(f)), plugin_traits());
    const Scenario s = test::minimal_fault_scenario(f);
    const Verdict a = check_property(Property::kRollback, s, plugin);
    const Verdict b = check_property(Property::kRollback, s, cpu);
    EXPECT_TRUE(a.applicable) << fault_name(f) << ": " << a.summary;
    EXPECT_FALSE(a.passed) << fault_name(f) << " survived the plugin path:\n" << s.to_text();
    EXPECT_EQ(a.summary, b.summary) << fault_name(f);
    // And without the fault, the same scenario passes through the plugin.
    const EngineUnderTest clean = backend_registry().resolve(kCpuPlugin).under_test();
    EXPECT_TRUE(check_property(Property::kRollback, s, clean).passed) << fault_name(f);
  }
}

// A fork through the ABI is a new sequence holding the parent's prefix: its
// logits are bitwise those of the in-tree engine's fork.
TEST(CpuPlugin, ForkAndTruncateGiveTheInTreeBits) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  for (const Scenario& s : {test::operations_scenario(Family::kLlama, 0, KvDtype::kF32)}) {
    const Weights weights = init_weights(s.config, s.weight_seed);
    const RunResult a = run_scenario(s, weights, plugin.factory);
    const RunResult b = run_scenario(s, weights, cpu_engine_factory());
    ASSERT_FALSE(a.engine_failed || a.threw) << a.error_message;
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t q = 0; q < a.logits.size(); ++q) {
      ASSERT_EQ(a.logits[q].size(), b.logits[q].size());
      EXPECT_EQ(std::memcmp(a.logits[q].data(), b.logits[q].data(), a.logits[q].size() * 4), 0)
          << "sequence " << q;
    }
  }
}

TEST(CpuPlugin, LogitsAreBitwiseTheInTreeOnes) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  const EngineFactory cpu = cpu_engine_factory();
  for (const Scenario& s : hand_made_scenarios()) {
    const Weights weights = init_weights(s.config, s.weight_seed);
    const RunResult a = run_scenario(s, weights, plugin.factory);
    const RunResult b = run_scenario(s, weights, cpu);
    ASSERT_FALSE(a.engine_failed || a.threw) << a.error_message;
    ASSERT_FALSE(b.engine_failed || b.threw) << b.error_message;
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t q = 0; q < a.logits.size(); ++q) {
      ASSERT_EQ(a.logits[q].size(), b.logits[q].size());
      ASSERT_FALSE(a.logits[q].empty() && q == 0);
      EXPECT_EQ(std::memcmp(a.logits[q].data(), b.logits[q].data(), a.logits[q].size() * 4), 0)
          << "sequence " << q;
    }
  }
}

TEST(CpuPlugin, UnknownPluginOptionIsAnInputError) {
  try {
    backend_registry().resolve(kCpuPlugin + "?colour=red");
    FAIL() << "resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option \"colour=red\""), std::string::npos)
        << e.what();
  }
  try {
    backend_registry().resolve(kCpuPlugin + "?fault=no_such_fault");
    FAIL() << "resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_fault"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvcheck
