// Scenario: the size measure of docs/FAULTS.md, validation messages that name
// the call, and the text form.
#include <gtest/gtest.h>

#include <cmath>

#include "properties/runner.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

TEST(Scenario, SizeMatchesTheFaultCatalogue) {
  // docs/FAULTS.md's "size" column; capacity_wraps' second p(1) is P9's probe,
  // not part of the scenario, so its scenario is one token and one call smaller.
  const std::pair<Fault, int> sizes[] = {{Fault::kSharedLayerCache, 8},
                                         {Fault::kSharedRows, 9},
                                         {Fault::kDecodePositionZero, 7},
                                         {Fault::kChunkPositionRestart, 8},
                                         {Fault::kPositionLagAfterFirst, 7},
                                         {Fault::kPositionBumpPerLayer, 6},
                                         {Fault::kTiledKvHeads, 8},
                                         {Fault::kResetKeepsKv, 9},
                                         {Fault::kResetKeepsPosition, 9},
                                         {Fault::kMaskTopLeft, 7},
                                         {Fault::kAppendOverwrites, 7},
                                         {Fault::kCompactionTableOnly, 10},
                                         {Fault::kRopeReapplied, 8},
                                         {Fault::kKvSwapped, 5},
                                         {Fault::kCapacityWraps, 5},
                                         {Fault::kTruncateNoop, 8},
                                         {Fault::kTruncateKeepsPosition, 8},
                                         {Fault::kResetClearsLayer0Only, 7},
                                         {Fault::kCowSkipped, 12},
                                         {Fault::kForkSharesPartialBlock, 7},
                                         {Fault::kFreedBlockStillReferenced, 8},
                                         {Fault::kRefcountLeak, 8},
                                         {Fault::kBlockAliasing, 6},
                                         {Fault::kKvScaleDropped, 5},
                                         {Fault::kKvScalePerTensor, 5},
                                         {Fault::kKvScaleSharedKv, 5},
                                         {Fault::kPrefixHashOnly, 9},
                                         {Fault::kPrefixHitExtraBlock, 10},
                                         {Fault::kRefusalLeavesHalfTable, 6},
                                         {Fault::kWindowOffByOne, 5},
                                         {Fault::kWindowPerChunk, 7},
                                         {Fault::kRingIndexUnwrapped, 6},
                                         {Fault::kShiftKeepsK, 6},
                                         {Fault::kShiftRotatesV, 6},
                                         {Fault::kShiftWrongSign, 6},
                                         {Fault::kTruncateLate, 9},
                                         {Fault::kTruncateAllNoop, 8},
                                         {Fault::kTruncateKeepsLast, 8},
                                         {Fault::kAbortFreesCached, 10},
                                         {Fault::kPrefixIgnoresKey, 9},
                                         {Fault::kHitPromptLogitsStale, 11},
                                         {Fault::kOffloadBeforeWrite, 8},
                                         {Fault::kOffloadCountsDrift, 8},
                                         {Fault::kRestoreKeepsTail, 9}};
  for (const auto& [fault, size] : sizes) {
    EXPECT_EQ(minimal_fault_scenario(fault).size(), size) << fault_name(fault);
  }
}

Scenario base() {
  Scenario s;
  s.config = small_config(Family::kGpt2, 1, 2, 2);
  s.capacity = 4;
  s.max_rows = 2;
  s.sequences = token_table(1, {3, 5, 2}, s.config.vocab);
  s.calls = {S(0), P({{0, 2}})};
  return s;
}

std::string validate_with(std::vector<Call> extra, void (*edit)(Scenario&) = nullptr) {
  Scenario s = base();
  s.calls.insert(s.calls.end(), extra.begin(), extra.end());
  if (edit != nullptr) edit(s);
  return s.validate();
}

TEST(Scenario, ValidateNamesTheCallAndWhatIsWrong) {
  EXPECT_EQ(base().validate(), "");
  EXPECT_EQ(validate_with({P({{1, 1}})}), "call 2: step feeds sequence 1 which is not running");
  EXPECT_EQ(validate_with({S(1), F(1), P({{1, 1}})}),
            "call 4: step feeds sequence 1 which is not running");
  EXPECT_EQ(validate_with({S(1), R(), P({{0, 1}})}),
            "call 4: step feeds sequence 0 which is not running");
  EXPECT_EQ(validate_with({S(0)}), "call 2: start of sequence 0, which was already started");
  EXPECT_EQ(validate_with({S(7)}),
            "call 2: start of sequence 7, which does not exist (there are 3)");
  EXPECT_EQ(validate_with({S(1), S(2)}),
            "call 3: start of sequence 2 exceeds max_rows 2 (2 sequences are running)");
  EXPECT_EQ(validate_with({P({{0, 2}})}),
            "call 2: step feeds sequence 0 tokens 2..3 but it has only 3");
  EXPECT_EQ(validate_with({S(1), P({{1, 5}})}),
            "call 3: step feeds sequence 1 up to position 4, past the capacity of 4");
  EXPECT_EQ(validate_with({P({{0, 0}})}), "call 2: step feeds sequence 0 a chunk of length 0");
  EXPECT_EQ(validate_with({P({{0, 1}, {0, 1}})}), "call 2: step feeds sequence 0 twice");
  EXPECT_EQ(validate_with({P({})}), "call 2: step feeds no sequence");
  EXPECT_EQ(validate_with({F(2)}), "call 2: finish of sequence 2 which is not running");
  EXPECT_EQ(validate_with({}, [](Scenario& s) { s.capacity = 65; }),
            "capacity: 65 is out of range [1, max_pos 64]");
  EXPECT_EQ(validate_with({}, [](Scenario& s) { s.max_rows = 0; }),
            "max_rows: 0 is out of range [1, 4096]");
  EXPECT_EQ(validate_with({}, [](Scenario& s) { s.sequences[1][3] = 64; }),
            "sequence 1, token 3: id 64 is outside the vocabulary [0, 64)");
  EXPECT_EQ(validate_with({}, [](Scenario& s) { s.config.n_kv_heads = 3; }),
            "config: n_kv_heads: 3 does not divide n_heads 2");
}

TEST(Scenario, EngineOptionsCarryTheCacheShapeAndNoFaults) {
  Scenario s = base();
  s.kv_dtype = KvDtype::kBF16;
  const EngineOptions o = s.engine_options();
  EXPECT_EQ(o.capacity, 4);
  EXPECT_EQ(o.max_rows, 2);
  EXPECT_EQ(o.kv_dtype, KvDtype::kBF16);
  EXPECT_FALSE(o.faults.any());
}

TEST(Scenario, TextFormShowsConfigTokensAndCalls) {
  Scenario s = base();
  s.calls.push_back(S(1));
  s.calls.push_back(P({{0, 1}, {1, 3}}));
  s.calls.push_back(F(0));
  s.calls.push_back(R());
  const std::string text = s.to_text();
  EXPECT_NE(text.find("config gpt2 layers=1 d_model=32 heads=2 kv_heads=2 head_dim=8 d_ff=128 "
                      "vocab=64 max_pos=64 rope_theta=10000 norm_eps=1e-05 qkv_bias=true\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("weight_seed 1 capacity 4 max_rows 2 kv_dtype f32\n"), std::string::npos);
  EXPECT_NE(text.find("s1 (5 tokens):"), std::string::npos);
  EXPECT_NE(text.find("call 0: start s0\ncall 1: step s0:2\ncall 2: start s1\n"
                      "call 3: step s0:1 s1:3\ncall 4: finish s0\ncall 5: reset\n"),
            std::string::npos)
      << text;
}

TEST(Scenario, PlanRecordsChunksCallsAndSharing) {
  const Scenario s = rich_scenario(Family::kGpt2, 4, 2, KvDtype::kF32);
  const SchedulePlan plan = plan_schedule(s);
  EXPECT_EQ(plan.fed, (std::vector<int>{6, 12, 5, 4, 4}));
  EXPECT_EQ(plan.chunks[1], (std::vector<int>{5, 1, 1, 2, 3}));
  EXPECT_EQ(plan.call_of_position[0], (std::vector<int>{2, 2, 2, 3, 5, 5}));
  EXPECT_EQ(plan.start_call[3], 8);
  EXPECT_EQ(plan.end_call[0], 6);
  EXPECT_EQ(plan.end_call[1], 10);
  EXPECT_EQ(plan.end_call[4], -1);
  EXPECT_EQ(plan.shared_step, (std::vector<bool>{true, true, true, true, false}));
}

TEST(Scenario, SoloScenarioPlacesTheSequenceBehindDecodingDummies) {
  const Scenario s = base();
  const std::vector<int32_t> tokens = {1, 2, 3};
  const Scenario solo = solo_scenario(s, tokens, {2, 1}, 1, 9);
  EXPECT_EQ(solo.validate(), "");
  EXPECT_EQ(solo.sequences[0], tokens);
  EXPECT_EQ(solo.calls, (std::vector<Call>{S(1), S(0), P({{1, 1}, {0, 2}}), P({{1, 1}, {0, 1}})}));
}

TEST(Scenario, FirstBitDifferenceSeesOneUlpAndSignedZero) {
  const std::vector<float> a = {1.0f, 0.0f, 2.0f};
  std::vector<float> b = a;
  EXPECT_EQ(first_bit_difference(a, b), std::nullopt);
  b[1] = -0.0f;
  EXPECT_EQ(first_bit_difference(a, b), 1u);
  b = a;
  b[2] = std::nextafter(2.0f, 3.0f);
  EXPECT_EQ(first_bit_difference(a, b), 2u);
  EXPECT_EQ(float_with_bits(1.0f), "1 (0x3f800000)");
}

}  // namespace
}  // namespace kvcheck::test
