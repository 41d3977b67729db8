// The property suite: P1..P10 on every in-tree CPU backend, through the
// conformance suite (conformance/suite.h) that users' engines get too; each
// backend is P10's reference for the other. KVCHECK_FAULT=name[,name] runs it
// against a faulty engine. Case counts are the CI budget
// (docs/GENERATORS.md); RC_PARAMS overrides. Also: the generators' own tests.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "backends/in_tree.h"
#include "conformance/rc_driver.h"
#include "conformance/suite.h"
#include "engine/traits_json.h"
#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/runner.h"

namespace kvcheck::test {
namespace {

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

// --model: the checkpoint's config and weights in every scenario, tokens in
// its vocabulary and sequences cut to its context, alone or in one shared
// context, while the schedules still vary.
TEST(Generators, CheckpointFixesTheModelAndFitsItsContext) {
  auto model = std::make_shared<Checkpoint>();
  model->path = "/checkpoints/tiny";
  model->hash = "fnv1a64:0000000000000001";
  model->config = llama_tiny();
  model->config.vocab = 7;
  model->config.max_pos = 5;
  model->weights = init_weights(model->config, 9);
  const rc::Gen<rcgen::ScenarioGenes> genes = rcgen::scenario_genes();
  for (const bool shared : {false, true}) {
    EngineTraits traits = EngineTraits::strict();
    traits.limits.capacity_shared = shared;
    int longer_than_context = 0, steps = 0;
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      const rcgen::ScenarioGenes g = genes(rc::Random(seed), 100).value();
      const Scenario s = rcgen::decode(g, traits, model);
      ASSERT_EQ(s.validate(), "") << s.to_text();
      ASSERT_EQ(s.model, model);
      ASSERT_EQ(s.config, model->config);
      ASSERT_LE(s.capacity, 5);
      size_t fed = 0;
      for (const auto& tokens : s.sequences) {
        fed += tokens.size();
        for (int32_t t : tokens) ASSERT_LT(t, 7);
      }
      if (shared) {
        ASSERT_LE(fed, 5u) << s.to_text();
      }
      const Scenario unfit = rcgen::decode(g, traits);
      for (const auto& tokens : unfit.sequences) longer_than_context += tokens.size() > 5;
      steps += int(s.calls.size());
    }
    EXPECT_GT(longer_than_context, 50) << "the context limit was never exercised";
    EXPECT_GT(steps, 300 * 2);
  }
  // A scenario whose config is not the checkpoint's does not validate.
  Scenario s = rcgen::decode(genes(rc::Random(1), 50).value(), EngineTraits::strict(), model);
  s.config.n_layers += 1;
  EXPECT_NE(s.validate().find("differs from the config.json of the --model checkpoint"),
            std::string::npos);
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

// --scenarios-per-model: each run of 3 scenarios shares one config (max_pos
// included) and weight seed, every scenario validates within its model's
// max_pos, and the runs draw different models.
TEST(Generators, ModelReuseDrawsRunsOfScenariosOnOneModel) {
  auto reuse = std::make_shared<rcgen::ModelReuse>();
  reuse->scenarios_per_model = 3;
  const rc::Gen<Scenario> gen =
      rcgen::scenario(rcgen::Emphasis::kAny, cpu_engine_traits_with_operations(), nullptr, reuse);
  std::set<std::pair<uint64_t, int>> models;
  for (int run = 0; run < 20; ++run) {
    std::optional<Scenario> first;
    for (int i = 0; i < 3; ++i) {
      const Scenario s = gen(rc::Random(uint64_t(100 + 3 * run + i)), 60).value();
      ASSERT_EQ(s.validate(), "") << s.to_text();
      ASSERT_GE(s.config.max_pos, s.capacity);
      if (!first) {
        first = s;
        continue;
      }
      // The window and the family follow scenario genes (a window, erase or
      // shift); the engine here declares both, so compare what the model
      // genes alone decide.
      EXPECT_EQ(s.weight_seed, first->weight_seed);
      EXPECT_EQ(s.config.max_pos, first->config.max_pos);
      EXPECT_EQ(s.config.n_layers, first->config.n_layers);
      EXPECT_EQ(s.config.n_heads, first->config.n_heads);
      EXPECT_EQ(s.config.d_ff, first->config.d_ff);
    }
    models.insert({first->weight_seed, first->config.n_layers * 1000 + first->config.d_ff});
  }
  EXPECT_GE(models.size(), 15u);
  // Drawn at sizes of their own: runs that start where RapidCheck's size is
  // 0 (each hunt's first case) still draw models of every size.
  auto at_zero = std::make_shared<rcgen::ModelReuse>();
  at_zero->scenarios_per_model = 3;
  const rc::Gen<Scenario> small =
      rcgen::scenario(rcgen::Emphasis::kAny, cpu_engine_traits_with_operations(), nullptr, at_zero);
  int larger = 0;
  for (int run = 0; run < 20; ++run) {
    const Scenario s = small(rc::Random(uint64_t(500 + run)), 0).value();
    for (int i = 1; i < 3; ++i) (void)small(rc::Random(uint64_t(900 + i)), 0).value();
    larger += s.config.n_layers > 1 || s.config.d_ff > 8 || s.config.vocab > 16;
  }
  EXPECT_GE(larger, 10);
}

// With a reused model's fixed max_pos, a fork of a sequence shifted up near
// it still fits: the child's tokens end at max_pos. A llama.cpp campaign
// with --scenarios-per-model drew "step feeds sequence 2 up to position 80,
// past max_pos 80" (issue 33, P10 in f16 flash attention, seed 20261332).
TEST(Generators, ModelReuseForksOfShiftedSequencesFit) {
  auto reuse = std::make_shared<rcgen::ModelReuse>();
  reuse->scenarios_per_model = 10;
  for (const rcgen::Emphasis emphasis : {rcgen::Emphasis::kAny, rcgen::Emphasis::kForks}) {
    const rc::Gen<Scenario> gen =
        rcgen::scenario(emphasis, cpu_engine_traits_with_operations(), nullptr, reuse);
    for (uint64_t seed = 1; seed <= 3000; ++seed) {
      const Scenario s = gen(rc::Random(seed), int(seed % 101)).value();
      ASSERT_EQ(s.validate(), "") << "seed " << seed << "\n" << s.to_text();
    }
  }
}

// limits.query_width_is_d_model (llama.cpp's gpt2): every drawn gpt2 model
// has n_heads*head_dim == d_model, and refuses() names one that does not.
TEST(Generators, QueryWidthIsDModelWhereTheEngineSaysSo) {
  EngineTraits traits;
  traits.limits.query_width_is_d_model = {Family::kGpt2};
  traits.limits.min_head_dim = 2;
  int gpt2 = 0;
  const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Scenario s = gen(rc::Random(seed), int(seed % 101)).value();
    ASSERT_EQ(s.validate(), "");
    EXPECT_EQ(traits.refuses(s.config, s.kv_dtype, s.capacity, s.max_rows), "") << s.to_text();
    if (s.config.family != Family::kGpt2) continue;
    ++gpt2;
    EXPECT_EQ(s.config.n_heads * s.config.head_dim, s.config.d_model);
  }
  EXPECT_GT(gpt2, 50);
  Config wide = gpt2_tiny();
  wide.d_model = wide.n_heads * wide.head_dim + 2;
  EXPECT_NE(traits.refuses(wide, KvDtype::kF32, 4, 1).find("limits.query_width_is_d_model"),
            std::string::npos);
}

// limits.head_dims (llama.cpp asks for real models' 64, 80, 96, 128): about
// half the scenarios take one of them, each of them occurs, every scenario
// is one the engine takes; those outside the limits are never drawn, and an
// engine that asks for none draws no such head.
TEST(Generators, HeadDimsWhereTheEngineAsksForThem) {
  EngineTraits traits;
  traits.limits.head_dims = {64, 80, 96, 128};
  traits.limits.min_head_dim = 2;
  std::map<int, int> drawn;
  const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Scenario s = gen(rc::Random(seed), int(seed % 101)).value();
    ASSERT_EQ(s.validate(), "");
    EXPECT_EQ(traits.refuses(s.config, s.kv_dtype, s.capacity, s.max_rows), "") << s.to_text();
    ++drawn[s.config.head_dim];
  }
  int asked = 0;
  for (int d : {64, 80, 96, 128}) {
    EXPECT_GT(drawn[d], 10) << "head_dim " << d;
    asked += drawn[d];
  }
  EXPECT_GT(asked, 100);
  EXPECT_LT(asked, 200);
  // Whole q8_0 blocks of 32 up to 100: 64 and 96 are drawn, 80 (not a
  // multiple of 32) and 128 (above the maximum) never.
  traits.limits.kv_dtypes = {KvDtype::kQ8_0};
  traits.limits.head_dim_multiple = 32;
  traits.limits.max_head_dim = 100;
  const rc::Gen<Scenario> q8 = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  std::set<int> q8_heads;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Scenario s = q8(rc::Random(seed), int(seed % 101)).value();
    EXPECT_EQ(traits.refuses(s.config, s.kv_dtype, s.capacity, s.max_rows), "") << s.to_text();
    q8_heads.insert(s.config.head_dim);
  }
  EXPECT_TRUE(q8_heads.count(64) && q8_heads.count(96)) << "the asked heads inside the limits";
  EXPECT_FALSE(q8_heads.count(80) || q8_heads.count(128)) << "outside them";
  const rc::Gen<Scenario> plain = rcgen::scenario();
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    EXPECT_LT(plain(rc::Random(seed), int(seed % 101)).value().config.head_dim, 64);
  }
  // Scenarios drawn on one model's genes (--scenarios-per-model) share the
  // asked head (the q8_0 rule's 32 wider heads go by the token seed, so
  // models without an asked head are not compared).
  traits.limits = ShapeLimits{};
  traits.limits.head_dims = {64, 80, 96, 128};
  auto reuse = std::make_shared<rcgen::ModelReuse>();
  reuse->scenarios_per_model = 4;
  const rc::Gen<Scenario> reusing = rcgen::scenario(rcgen::Emphasis::kAny, traits, nullptr, reuse);
  int shared = 0;
  for (int model = 0; model < 20; ++model) {
    std::set<int> heads;
    uint64_t weight_seed = 0;
    for (int i = 0; i < 4; ++i) {
      const Scenario s = reusing(rc::Random(uint64_t(700 + 4 * model + i)), 60).value();
      heads.insert(s.config.head_dim);
      weight_seed = s.weight_seed;
    }
    if (weight_seed % 2 == 0) continue;
    ++shared;
    EXPECT_EQ(heads.size(), 1u) << "model " << model;
    EXPECT_GE(*heads.begin(), 64) << "model " << model;
  }
  EXPECT_GE(shared, 5);
}

// The lesson's GPT (learned positions, MHA, d_out % num_heads asserted,
// d_ff = 4 x d_model): every drawn model is one it can load, P7 never
// applies, and refuses() names each rule a model breaks.
TEST(Generators, TheLessonsShapesWhereTheEngineSaysSo) {
  EngineTraits traits;
  Result<EngineTraits> lesson = traits_from_json_text(
      R"({"identity": {"name": "lesson"}, "limits": {"positions": ["learned"], "mha_only": true,
          "query_width_is_d_model": ["gpt2"], "d_ff_is_4x_d_model": ["gpt2"]}})");
  ASSERT_TRUE(lesson.ok()) << lesson.error();
  traits = lesson.value();
  ASSERT_EQ(traits.limits.families, std::vector<Family>{Family::kGpt2});
  const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  std::set<int> heads;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Scenario s = gen(rc::Random(seed), int(seed % 101)).value();
    ASSERT_EQ(s.validate(), "");
    const Config& c = s.config;
    EXPECT_EQ(traits_exclude(traits, s), "") << s.to_text();
    EXPECT_EQ(c.family, Family::kGpt2);
    EXPECT_EQ(c.n_kv_heads, c.n_heads);
    EXPECT_EQ(c.n_heads * c.head_dim, c.d_model);
    EXPECT_EQ(c.d_ff, 4 * c.d_model);
    heads.insert(c.n_heads);
  }
  EXPECT_GE(heads.size(), 3u) << "the head count still varies";
  const EngineUnderTest subject(EngineFactory{}, traits);
  EXPECT_NE(never_applicable(Property::kGqa, subject).find("limits.mha_only"), std::string::npos);
  Config c = gpt2_tiny();  // 4 heads of 8 over d_model 32, d_ff 128: the lesson's shape
  EXPECT_EQ(traits.refuses(c, KvDtype::kF32, 4, 1), "");
  c.n_kv_heads = 2;
  EXPECT_NE(traits.refuses(c, KvDtype::kF32, 4, 1).find("(limits.mha_only)"), std::string::npos);
  c = gpt2_tiny(), c.d_ff = 96;
  EXPECT_EQ(traits.refuses(c, KvDtype::kF32, 4, 1),
            "d_ff 96 differs from 4 x d_model 128 (limits.d_ff_is_4x_d_model)");
  EXPECT_EQ(traits.refuses(llama_tiny(), KvDtype::kF32, 4, 1), "family llama (rope positions)");
}

TEST(Generators, EveryCoverageTagOccurs) {
  const rc::Gen<Scenario> scenarios = rcgen::scenario();
  rcgen::Coverage seen;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    seen |= rcgen::coverage(scenarios(rc::Random(seed), int(seed % 101)).value());
  }
  EXPECT_TRUE(seen.gpt2 && seen.mha && seen.gqa && seen.mqa);
  EXPECT_TRUE(seen.batched_step && seen.mixed_step && seen.one_token_chunk);
  EXPECT_TRUE(seen.reset && seen.finish && seen.reused_row);
  EXPECT_TRUE(seen.at_capacity && seen.reduced_dtype);
}

TEST(Generators, EveryOperationCoverageTagOccursWhenTheEngineDeclaresThem) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kAny, cpu_engine_traits_with_operations());
  rcgen::Coverage seen;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const Scenario s = scenarios(rc::Random(seed), int(seed % 101)).value();
    ASSERT_EQ(s.validate(), "") << s.to_text();
    seen |= rcgen::coverage(s);
  }
  EXPECT_TRUE(seen.paged && seen.fork && seen.fork_mid_block && seen.fork_at_boundary);
  EXPECT_TRUE(seen.truncate && seen.truncate_to_zero && seen.truncate_across_blocks);
  // The CPU engine declares q8_0: drawn with two scale blocks per head too.
  EXPECT_TRUE(seen.q8_multi_block);
  EXPECT_TRUE(seen.prefix_cache && seen.flush && seen.small_pool && seen.shared_prompt);
  // Windows smaller than the prompts (rings that wrap), chunks across the edge.
  EXPECT_TRUE(seen.window && seen.window_wraps && seen.window_straddle);
  // Context shifts (llama, contiguous), several on one sequence too.
  EXPECT_TRUE(seen.erase);
  EXPECT_TRUE(seen.shift);
  EXPECT_TRUE(seen.shifts_in_a_row);
  // (Save and restore: their own emphasis, TheSaveRestoreEmphasis... below.)
  // Without the operations declared, none is drawn; without q8_0, no q8_0.
  const rc::Gen<Scenario> strict = rcgen::scenario();
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    const Scenario s = strict(rc::Random(seed), int(seed % 101)).value();
    const rcgen::Coverage c = rcgen::coverage(s);
    EXPECT_FALSE(c.paged || c.fork || c.truncate || c.prefix_cache || c.flush || c.small_pool ||
                 c.window || c.erase || c.shift || c.restore)
        << seed;
    EXPECT_NE(s.kv_dtype, KvDtype::kQ8_0) << seed;
  }
}

// The kill matrix draws the shift faults' rows with Emphasis::kContextShift:
// nearly every case erases or shifts (the default generator: about 1 %), and
// an engine without erase and shift still gets none.
TEST(Generators, TheContextShiftEmphasisDrawsAShiftInNearlyEveryCase) {
  const auto share = [](const rc::Gen<Scenario>& scenarios) {
    int with = 0;
    for (uint64_t seed = 1; seed <= 400; ++seed) {
      const Scenario s = scenarios(rc::Random(seed), int(seed % 101)).value();
      EXPECT_EQ(s.validate(), "") << s.to_text();
      const rcgen::Coverage c = rcgen::coverage(s);
      with += c.erase || c.shift;
    }
    return with / 4.0;  // percent
  };
  const double emphasized =
      share(rcgen::scenario(rcgen::Emphasis::kContextShift, cpu_engine_traits_with_operations()));
  const double plain =
      share(rcgen::scenario(rcgen::Emphasis::kAny, cpu_engine_traits_with_operations()));
  std::cout << "erase or shift in " << emphasized << " % of kContextShift cases, " << plain
            << " % of the default generator's\n";
  EXPECT_GE(emphasized, 80);
  EXPECT_EQ(share(rcgen::scenario(rcgen::Emphasis::kContextShift)), 0);
}

// The GPU suite (tests/gpu/gpu_property_test.cpp) draws from the `cuda`
// backend's traits: they must yield every operation, so that P11..P15 run
// on the CUDA engine where a device exists, and never q8_0, which it refuses.
TEST(Generators, TheCudaTraitsDrawEveryOperationAndNoQ8) {
  const rc::Gen<Scenario> scenarios = rcgen::scenario(rcgen::Emphasis::kAny, cuda_engine_traits());
  rcgen::Coverage seen;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const Scenario s = scenarios(rc::Random(seed), int(seed % 101)).value();
    ASSERT_EQ(s.validate(), "") << s.to_text();
    ASSERT_NE(s.kv_dtype, KvDtype::kQ8_0) << seed;
    ASSERT_EQ(s.config.sliding_window, 0) << seed;  // the CUDA engine declares no windows
    seen |= rcgen::coverage(s);
  }
  EXPECT_TRUE(seen.paged && seen.fork && seen.fork_mid_block && seen.fork_at_boundary);
  EXPECT_TRUE(seen.truncate && seen.truncate_to_zero && seen.truncate_across_blocks);
  EXPECT_TRUE(seen.prefix_cache && seen.flush && seen.small_pool && seen.shared_prompt);
  // The CUDA engine does not implement erase, shift, save or restore: never drawn.
  EXPECT_FALSE(seen.erase || seen.shift || seen.restore);
}

}  // namespace
// The default generator on the CPU engine's traits reaches every shape the
// issue behind properties/schedule/ names, in a share of cases that a
// minute's campaign turns into thousands: every schedule call and storage
// setting in 10 % of the cases or more, and the erase/shift shapes that
// tell a cell's index from its position in 5 % or more (before: 0-1 %).
TEST(Generators, TheDefaultGeneratorReachesEveryShape) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kAny, cpu_engine_traits_with_operations());
  constexpr int kCases = 2000;
  std::map<std::string, int> seen;
  for (uint64_t seed = 1; seed <= kCases; ++seed) {
    const Scenario s = scenarios(rc::Random(seed), int(seed % 100)).value();
    ASSERT_EQ(s.validate(), "") << s.to_text();
    const rcgen::Coverage c = rcgen::coverage(s);
    const std::pair<const char*, bool> tags[] = {
        {"prefill", c.prefill},
        {"decode", c.decode},
        {"finish", c.finish},
        {"reset", c.reset},
        {"fork", c.fork},
        {"truncate", c.truncate},
        {"erase", c.erase},
        {"shift", c.shift},
        {"flush", c.flush},
        {"paged", c.paged},
        {"prefix cache", c.prefix_cache},
        {"window", c.window},
        {"f32", c.f32},
        {"bf16", c.bf16},
        {"f16", c.f16},
        {"q8_0", c.q8_0},
        {"erase middle, then step", c.erase_middle_then_step},
        {"shift up", c.shift_up},
        {"shift middle, then step", c.shift_middle_then_step},
        {"fed where index != position", c.fed_with_gap},
        {"div", c.div},
        {"fed after a div shared a position", c.fed_with_shared_position},
        {"verify", c.verify},
        {"verify: reject all", c.verify_reject_all},
        {"verify: accept all", c.verify_accept_all},
        {"verify: one draft", c.verify_one_draft},
        {"verify: across blocks", c.verify_across_blocks},
        {"abort", c.abort},
        {"offload", c.offload}};
    for (const auto& [name, has] : tags) seen[name] += has;
  }
  const std::set<std::string> shapes = {"erase middle, then step",
                                        "shift up",
                                        "shift middle, then step",
                                        "fed where index != position",
                                        "fed after a div shared a position",
                                        "verify: reject all",
                                        "verify: accept all",
                                        "verify: one draft",
                                        "verify: across blocks"};
  for (const auto& [name, n] : seen) {
    const double percent = 100.0 * n / kCases;
    std::cout << name << ": " << percent << " %\n";
    EXPECT_GE(percent, shapes.count(name) ? 5 : 10) << name;
  }
}

// A rollback in a sequence whose blocks a fork shares (parent or child):
// the fork emphasis, which P11's cases draw under, reaches it in 5 % or
// more of its cases (the default generator: about 2 %).
TEST(Generators, TheForkEmphasisRollsBackForkedSequences) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kForks, cpu_engine_traits_with_operations());
  constexpr int kCases = 2000;
  int forked = 0;
  for (uint64_t seed = 1; seed <= kCases; ++seed) {
    forked += rcgen::coverage(scenarios(rc::Random(seed), int(seed % 100)).value()).verify_forked;
  }
  std::cout << "verify: forked: " << 100.0 * forked / kCases << " %\n";
  EXPECT_GE(100.0 * forked / kCases, 5.0);
}

// A later request whose prompt starts with a whole block an aborted prefill
// fed: the prefix-cache emphasis (P15's cases and the abort fault's kill
// row) reaches it in 5 % or more of its cases (the default: under 1 %).
TEST(Generators, ThePrefixCacheEmphasisHitsAfterAnAbort) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kPrefixCache, cpu_engine_traits_with_operations());
  constexpr int kCases = 2000;
  int hits = 0;
  for (uint64_t seed = 1; seed <= kCases; ++seed) {
    hits += rcgen::coverage(scenarios(rc::Random(seed), int(seed % 100)).value()).hit_after_abort;
  }
  std::cout << "abort, then a hit on its prefix: " << 100.0 * hits / kCases << " %\n";
  EXPECT_GE(100.0 * hits / kCases, 5.0);
}

// The offload emphasis (the kill rows of the host tier's faults) offloads
// in most cases, and steps an offloaded sequence again (bringing its blocks
// back) in a third or more.
TEST(Generators, TheOffloadEmphasisOffloadsAndBringsBlocksBack) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kOffload, cpu_engine_traits_with_operations());
  constexpr int kCases = 2000;
  int offloads = 0, back = 0;
  for (uint64_t seed = 1; seed <= kCases; ++seed) {
    const rcgen::Coverage c = rcgen::coverage(scenarios(rc::Random(seed), int(seed % 100)).value());
    offloads += c.offload;
    back += c.offload_then_step;
  }
  std::cout << "offload: " << 100.0 * offloads / kCases
            << " %, then a step: " << 100.0 * back / kCases << " %\n";
  EXPECT_GE(100.0 * offloads / kCases, 50.0);
  EXPECT_GE(100.0 * back / kCases, 33.0);
}

// Keyed requests, and a prompt shared across two keys (a hit that must be
// a miss), under the prefix-cache emphasis P15 draws with: 10 % and 5 %.
TEST(Generators, ThePrefixCacheEmphasisSharesPromptsAcrossCacheKeys) {
  const rc::Gen<Scenario> scenarios =
      rcgen::scenario(rcgen::Emphasis::kPrefixCache, cpu_engine_traits_with_operations());
  constexpr int kCases = 2000;
  int keyed = 0, across = 0;
  for (uint64_t seed = 1; seed <= kCases; ++seed) {
    const rcgen::Coverage c = rcgen::coverage(scenarios(rc::Random(seed), int(seed % 100)).value());
    keyed += c.cache_keys;
    across += c.shared_prompt_across_keys;
  }
  std::cout << "cache keys: " << 100.0 * keyed / kCases
            << " %, shared prompt across keys: " << 100.0 * across / kCases << " %\n";
  EXPECT_GE(100.0 * keyed / kCases, 10.0);
  EXPECT_GE(100.0 * across / kCases, 5.0);
}

// Saves and restores: their emphasis (the restore_keeps_tail kill row)
// draws a restore that changes the sequence, and a step after it, in 5 % of
// its cases or more (7.0 and 5.55 % measured; many small cases have no
// room for an operation); the default generator draws some too (0.2 %),
// and none for an engine that does not declare them.
TEST(Generators, TheSaveRestoreEmphasisRestoresSavedSequences) {
  const auto share = [](rcgen::Emphasis emphasis, const EngineTraits& traits) {
    const rc::Gen<Scenario> scenarios = rcgen::scenario(emphasis, traits);
    constexpr int kCases = 2000;
    int restores = 0, then_step = 0;
    for (uint64_t seed = 1; seed <= kCases; ++seed) {
      const Scenario s = scenarios(rc::Random(seed), int(seed % 100)).value();
      EXPECT_EQ(s.validate(), "") << s.to_text();
      const rcgen::Coverage c = rcgen::coverage(s);
      restores += c.restore;
      then_step += c.restore_then_step;
    }
    std::cout << "restore: " << 100.0 * restores / kCases << " %, then a step "
              << 100.0 * then_step / kCases << " %\n";
    return 100.0 * restores / kCases;
  };
  const EngineTraits cpu = cpu_engine_traits_with_operations();
  EXPECT_GE(share(rcgen::Emphasis::kSaveRestore, cpu), 5.0);
  EXPECT_GT(share(rcgen::Emphasis::kAny, cpu), 0.0);
  EngineTraits without = cpu;
  without.operations.save_restore = false;
  EXPECT_EQ(share(rcgen::Emphasis::kSaveRestore, without), 0.0);
}

}  // namespace kvcheck::test

int main(int argc, char** argv) {
  return kvcheck::conformance::run(
      argc, argv, {{"cpu", 2000, "cpu-reference", ""}, {"cpu-reference", 1000, "cpu", ""}});
}
