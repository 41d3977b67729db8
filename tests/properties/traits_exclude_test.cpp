// The generators draw only what the traits declare: 500 scenarios under
// traits lacking an operation or narrowing a limit never contain what is
// excluded (checked here independently of traits_exclude), while under the
// full traits some do, so the exclusion is not vacuous.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <functional>

#include "backends/in_tree.h"
#include "properties/rc/generators.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

bool has_call(const Scenario& s, Call::Kind kind) {
  for (const Call& c : s.calls) {
    if (c.kind == kind) return true;
  }
  return false;
}

bool has_multi_sequence_step(const Scenario& s) {
  for (const Call& c : s.calls) {
    if (c.kind == Call::Kind::kStep && c.chunks.size() > 1) return true;
  }
  return false;
}

// The most tokens running sequences hold at once.
int most_held(const Scenario& s) {
  std::vector<int> fed(s.sequences.size(), 0);  // [sequence]
  std::vector<bool> running(s.sequences.size(), false);
  int most = 0;
  for (const Call& c : s.calls) {
    if (c.kind == Call::Kind::kStart) running[size_t(c.sequence)] = true;
    if (c.kind == Call::Kind::kFinish) running[size_t(c.sequence)] = false;
    if (c.kind == Call::Kind::kReset) running.assign(running.size(), false);
    for (const ChunkSpec& chunk : c.chunks) fed[size_t(chunk.sequence)] += chunk.length;
    int held = 0;
    for (size_t i = 0; i < fed.size(); ++i) held += running[i] ? fed[i] : 0;
    most = std::max(most, held);
  }
  return most;
}

struct Exclusion {
  const char* name;
  std::function<void(EngineTraits&)> narrow;
  std::function<bool(const Scenario&)> contains;  // what the narrowed traits exclude
};

const std::vector<Exclusion>& exclusions() {
  static const std::vector<Exclusion> kAll = {
      {"reset", [](EngineTraits& t) { t.operations.reset = false; },
       [](const Scenario& s) { return has_call(s, Call::Kind::kReset); }},
      {"finish", [](EngineTraits& t) { t.operations.finish = false; },
       [](const Scenario& s) { return has_call(s, Call::Kind::kFinish); }},
      {"multi_sequence_step", [](EngineTraits& t) { t.operations.multi_sequence_step = false; },
       has_multi_sequence_step},
      {"head_dim_multiple_32", [](EngineTraits& t) { t.limits.head_dim_multiple = 32; },
       [](const Scenario& s) { return s.config.head_dim % 32 != 0; }},
      {"capacity_shared", [](EngineTraits& t) { t.limits.capacity_shared = true; },
       [](const Scenario& s) { return most_held(s) > s.capacity; }},
      {"gpt2_only_f16",
       [](EngineTraits& t) {
         t.limits.families = {Family::kGpt2};
         t.limits.kv_dtypes = {KvDtype::kF16};
       },
       [](const Scenario& s) {
         return s.config.family != Family::kGpt2 || s.kv_dtype != KvDtype::kF16;
       }},
  };
  return kAll;
}

std::vector<Scenario> generated(const EngineTraits& traits, int n) {
  std::vector<Scenario> out;
  const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  for (int i = 0; i < n; ++i) out.push_back(gen(rc::Random(uint64_t(1000 + i)), i % 101).value());
  return out;
}

class Exclusions : public testing::TestWithParam<int> {};

TEST_P(Exclusions, GeneratedScenariosKeepToTheTraits) {
  const Exclusion& e = exclusions()[size_t(GetParam())];
  EngineTraits narrowed = cpu_engine_traits();
  e.narrow(narrowed);
  ASSERT_EQ(narrowed.validate(), "");
  int contained = 0;
  for (const Scenario& s : generated(narrowed, 500)) {
    ASSERT_EQ(s.validate(), "") << s.to_text();
    EXPECT_FALSE(e.contains(s)) << e.name << "\n" << s.to_text();
    EXPECT_EQ(traits_exclude(narrowed, s), "") << s.to_text();
    contained += e.contains(s);
  }
  EXPECT_EQ(contained, 0);
  // Under the full traits the same draws do contain it.
  int unrestricted = 0;
  for (const Scenario& s : generated(cpu_engine_traits(), 500)) unrestricted += e.contains(s);
  EXPECT_GT(unrestricted, 0) << e.name << " never drawn even when allowed";
}

INSTANTIATE_TEST_SUITE_P(Traits, Exclusions, testing::Range(0, int(exclusions().size())),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(exclusions()[size_t(info.param)].name);
                         });

TEST(Exclusions, APropertyNeedingAMissingOperationIsNotApplicable) {
  const Scenario s = test::rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);  // has a reset
  EngineTraits no_reset = cpu_engine_traits();
  no_reset.operations.reset = false;
  const EngineUnderTest subject(cpu_engine_factory(), no_reset);
  for (Property p : {Property::kReset, Property::kOracle, Property::kChunking}) {
    const Verdict v = check_property(p, s, subject);
    EXPECT_FALSE(v.applicable) << property_label(p);
    EXPECT_TRUE(v.passed) << property_label(p);  // n/a is not a failure ...
    EXPECT_NE(v.summary.find("the engine lacks reset"), std::string::npos) << v.summary;
  }
  // ... nor a pass on the full traits: the same scenario runs there.
  EXPECT_TRUE(check_property(Property::kReset, s,
                             EngineUnderTest(cpu_engine_factory(), cpu_engine_traits()))
                  .applicable);
}

}  // namespace
}  // namespace kvcheck
