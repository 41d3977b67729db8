// The property suite: P1..P9 on the correct CPU engine, on generated
// scenarios, each kernel path where the property depends on the kernels.
// Case counts are the CI budget (docs/GENERATORS.md); RC_PARAMS overrides.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"
#include "tests/properties/rc_driver.h"

namespace kvcheck::test {
namespace {

// KVCHECK_FAULT=name[,name] runs the suite against a faulty engine, to watch
// a property catch a fault and write its case file; unset, the engine is the
// correct one and every property must hold.
FaultSet faults_from_environment() {
  const char* names = std::getenv("KVCHECK_FAULT");
  if (names == nullptr) return FaultSet();
  const Result<FaultSet> faults = parse_fault_list(names);
  if (!faults.ok()) {
    ADD_FAILURE() << "KVCHECK_FAULT: " << faults.error();
    return FaultSet();
  }
  return faults.value();
}

void expect_property(Property property, KernelPath kernels, int cases) {
  const FaultSet faults = faults_from_environment();
  if (faults.any()) std::cout << "engine faults ON: " << faults.to_string() << std::endl;
  const EngineFactory factory = cpu_engine_factory(faults, kernels);
  // RapidCheck evaluates the shrunk counterexample last, so the last failing
  // case seen is the one to keep as a file.
  std::optional<std::pair<Scenario, Verdict>> last_failure;
  check_scenarios(cases, rcgen::emphasis_for(property), [&](const Scenario& s) {
    // check_property passes an invalid scenario as "not applicable"; a
    // generator that made one would silently test nothing.
    RC_ASSERT(s.validate() == "");
    classify(s);
    const Verdict v = check_property(property, s, factory);
    RC_CLASSIFY(!v.applicable, "not applicable");
    if (!v.passed) {
      last_failure.emplace(s, v);
      RC_FAIL(v.summary + "\n" + v.detail);
    }
  });
  if (last_failure && testing::Test::HasFailure()) {
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    FailureContext context;
    context.backend = kernels == KernelPath::kOptimized ? "cpu" : "cpu-reference";
    context.found_by = std::string("ctest ") + info->test_suite_name() + "." + info->name();
    const WrittenCase written =
        write_failure_case(last_failure->first, last_failure->second, faults, context);
    std::cout << written.report << std::endl;
  }
}

constexpr KernelPath kOpt = KernelPath::kOptimized;
constexpr KernelPath kRef = KernelPath::kReference;

// Both kernel paths where the property checks arithmetic (oracle bounds,
// bitwise invariance of the kernels); the optimized one where it checks what
// the cache bookkeeping does with rows, resets and capacity.
TEST(Properties, P1OracleOptimized) {
  expect_property(Property::kOracle, kOpt, 2000);
}
TEST(Properties, P1OracleReference) {
  expect_property(Property::kOracle, kRef, 1000);
}
TEST(Properties, P2ChunkingOptimized) {
  expect_property(Property::kChunking, kOpt, 2000);
}
TEST(Properties, P2ChunkingReference) {
  expect_property(Property::kChunking, kRef, 1000);
}
TEST(Properties, P3BatchOptimized) {
  expect_property(Property::kBatch, kOpt, 2000);
}
TEST(Properties, P3BatchReference) {
  expect_property(Property::kBatch, kRef, 1000);
}
TEST(Properties, P4Reset) {
  expect_property(Property::kReset, kOpt, 2000);
}
TEST(Properties, P5Compaction) {
  expect_property(Property::kCompaction, kOpt, 2000);
}
TEST(Properties, P6CacheStateOptimized) {
  expect_property(Property::kCacheState, kOpt, 2000);
}
TEST(Properties, P6CacheStateReference) {
  expect_property(Property::kCacheState, kRef, 1000);
}
TEST(Properties, P7GqaOptimized) {
  expect_property(Property::kGqa, kOpt, 2000);
}
TEST(Properties, P7GqaReference) {
  expect_property(Property::kGqa, kRef, 1000);
}
TEST(Properties, P8Determinism) {
  expect_property(Property::kDeterminism, kOpt, 2000);
}
TEST(Properties, P9Capacity) {
  expect_property(Property::kCapacity, kOpt, 2000);
}

// The generators themselves: every gene set decodes to a valid scenario, and
// the shapes the suite promises to cover all occur.
TEST(Generators, EveryScenarioValidates) {
  check_scenarios(500, rcgen::Emphasis::kAny, [](const Scenario& s) {
    RC_ASSERT(s.validate() == "");
    RC_ASSERT(s.sequences.size() <= size_t(rcgen::kMaxSequences));
    RC_ASSERT(s.config.n_heads <= rcgen::kMaxHeads);
    RC_ASSERT(s.config.n_heads % s.config.n_kv_heads == 0);
    RC_ASSERT(s.config.head_dim % 2 == 0);
    RC_ASSERT(s.config.max_pos >= s.capacity);
  });
}

TEST(Generators, SharedKvHeadsEmphasisNeverGivesMha) {
  check_scenarios(200, rcgen::Emphasis::kSharedKvHeads, [](const Scenario& s) {
    RC_ASSERT(s.validate() == "");
    RC_ASSERT(s.config.n_kv_heads < s.config.n_heads);
  });
}

TEST(Generators, ShrunkGenesStayValid) {
  // Walks a few levels of the shrink tree of random genes: every shrink the
  // shrinker may try must decode to a valid scenario too.
  const rc::Gen<rcgen::ScenarioGenes> genes = rcgen::scenario_genes();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    rc::Shrinkable<rcgen::ScenarioGenes> root = genes(rc::Random(seed), 60);
    for (int depth = 0; depth < 6; ++depth) {
      auto shrinks = root.shrinks();
      int tried = 0;
      std::optional<rc::Shrinkable<rcgen::ScenarioGenes>> next;
      while (auto shrink = shrinks.next()) {
        const Scenario s = rcgen::decode(shrink->value());
        ASSERT_EQ(s.validate(), "") << s.to_text();
        if (!next) next = *shrink;
        if (++tried == 40) break;
      }
      if (!next) break;
      root = *next;
    }
  }
}

TEST(Generators, EveryCoverageTagOccurs) {
  const rc::Gen<Scenario> scenarios = rcgen::scenario();
  rcgen::Coverage seen;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const rcgen::Coverage c = rcgen::coverage(scenarios(rc::Random(seed), int(seed % 101)).value());
    seen.gpt2 |= c.gpt2;
    seen.mha |= c.mha;
    seen.gqa |= c.gqa;
    seen.mqa |= c.mqa;
    seen.batched_step |= c.batched_step;
    seen.mixed_step |= c.mixed_step;
    seen.one_token_chunk |= c.one_token_chunk;
    seen.reset |= c.reset;
    seen.finish |= c.finish;
    seen.reused_row |= c.reused_row;
    seen.at_capacity |= c.at_capacity;
    seen.reduced_dtype |= c.reduced_dtype;
  }
  EXPECT_TRUE(seen.gpt2 && seen.mha && seen.gqa && seen.mqa);
  EXPECT_TRUE(seen.batched_step && seen.mixed_step && seen.one_token_chunk);
  EXPECT_TRUE(seen.reset && seen.finish && seen.reused_row);
  EXPECT_TRUE(seen.at_capacity && seen.reduced_dtype);
}

}  // namespace
}  // namespace kvcheck::test
