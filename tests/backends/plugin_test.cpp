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
  return out;
}

TEST(CpuPlugin, ResolvesWithTheInTreeTraitsButFaultSwitches) {
  const Backend plugin = backend_registry().resolve(kCpuPlugin);
  EngineTraits expected = cpu_engine_traits();
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
  // The in-tree engine as the ABI carries it: the core calls only (no fork,
  // truncate, paged storage or prefix cache; docs/OPERATIONS.md).
  const EngineUnderTest cpu(cpu_engine_factory(), cpu_engine_traits());
  int applicable = 0;
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
    }
  }
  // P10 has no reference here and P11-P15 need operations the ABI does not
  // carry; every other property checks something.
  EXPECT_GE(applicable, 5 * (kPropertyCount - 6) - 5);
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
}

}  // namespace
}  // namespace kvcheck
