// Each property fails, at the right place, on the faults docs/FAULTS.md says
// it catches, on the smallest scenario docs/FAULTS.md derives for the fault.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "backends/in_tree.h"
#include "engine/cpu/cpu_engine.h"
#include "properties/runner.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

struct Expected {
  Property property;
  int call, sequence, position;
  int layer = -1, kv_head = -1, first_bad = -1, last_bad = -1;  // P6 only
};

struct FaultCase {
  Fault fault;
  std::vector<Expected> caught;
};

const std::vector<FaultCase>& fault_cases() {
  using P = Property;
  static const std::vector<FaultCase> cases = {
      {Fault::kSharedLayerCache,
       {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}, {P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      {Fault::kSharedRows,
       {{P::kOracle, 2, 0, 0}, {P::kBatch, 2, 0, 0}, {P::kCacheState, 2, 0, 0, 0, 0, 0, 0}}},
      {Fault::kDecodePositionZero,
       {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}, {P::kCacheState, 2, 0, 1, 0, 0, 1, 1}}},
      {Fault::kChunkPositionRestart,
       {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}, {P::kCacheState, 2, 0, 1, 0, 0, 1, 2}}},
      {Fault::kPositionLagAfterFirst,
       {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}, {P::kCacheState, 2, 0, 1, 0, 0, 1, 1}}},
      {Fault::kPositionBumpPerLayer,
       {{P::kOracle, 1, 0, 0}, {P::kCacheState, 1, 0, 0, 1, 0, 0, 0}}},
      {Fault::kTiledKvHeads, {{P::kOracle, 1, 0, 0}, {P::kGqa, 1, 0, 0}}},
      {Fault::kResetKeepsKv,
       {{P::kOracle, 4, 1, 0}, {P::kReset, 4, 1, 0}, {P::kCacheState, 3, 1, 0, 0}}},
      {Fault::kResetKeepsPosition,
       {{P::kOracle, 4, 1, 0}, {P::kReset, 4, 1, 0}, {P::kCacheState, 4, 1, 0, 0, 0, 0, 0}}},
      {Fault::kMaskTopLeft, {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}}},
      {Fault::kAppendOverwrites,
       {{P::kOracle, 2, 0, 1}, {P::kChunking, 2, 0, 1}, {P::kCacheState, 2, 0, 0, 0, 0, 0, 1}}},
      {Fault::kCompactionTableOnly,
       {{P::kOracle, 4, 1, 1}, {P::kCompaction, 4, 1, 1}, {P::kCacheState, 3, 1, 0, 0, 0, 0, 0}}},
      {Fault::kRopeReapplied,
       {{P::kOracle, 2, 0, 2}, {P::kChunking, 2, 0, 2}, {P::kCacheState, 2, 0, 1, 0, 0, 1, 1}}},
      {Fault::kKvSwapped, {{P::kOracle, 1, 0, 0}, {P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      {Fault::kCapacityWraps, {{P::kCapacity, 2, 0, 1}}},
      {Fault::kTruncateNoop,
       {{P::kOracle, 3, 0, 0}, {P::kRollback, 3, 0, 0}, {P::kCacheState, 2, 0, 0, 0}}},
      {Fault::kTruncateKeepsPosition,
       {{P::kOracle, 3, 0, 0}, {P::kRollback, 3, 0, 0}, {P::kCacheState, 3, 0, 0, 0, 0, 0, 0}}},
      {Fault::kResetClearsLayer0Only, {{P::kPoison, 2, -1, -1}}},
      {Fault::kCowSkipped,
       {{P::kOracle, 4, 0, 2}, {P::kSharing, 4, 0, 2}, {P::kCacheState, 3, 0, 1, 0, 0, 1, 1}}},
      {Fault::kForkSharesPartialBlock, {{P::kPool, 2, -1, -1}}},
      {Fault::kFreedBlockStillReferenced, {{P::kPool, 3, -1, -1}}},
      {Fault::kRefcountLeak, {{P::kPool, 3, -1, -1}}},
      {Fault::kBlockAliasing, {{P::kOracle, 1, 0, 0}, {P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      {Fault::kKvScaleDropped, {{P::kOracle, 1, 0, 0}, {P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      {Fault::kKvScalePerTensor, {{P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      {Fault::kKvScaleSharedKv, {{P::kCacheState, 1, 0, 0, 0, 0, 0, 0}}},
      // s1 takes s0's block for its first token: its cache and its second
      // token's logits are wrong, and its hit differs from a cold run.
      {Fault::kPrefixHashOnly,
       {{P::kOracle, 3, 1, 1}, {P::kCacheState, 3, 1, 0, 0, 0, 0, 0}, {P::kPrefix, 3, 1, 1}}},
      // s1 writes its second token into s0's second block: s0's cache.
      {Fault::kPrefixHitExtraBlock, {{P::kCacheState, 3, 0, 1, 0, 0, 1, 1}}},
      // The refused step leaves s0 with a block for no token.
      {Fault::kRefusalLeavesHalfTable, {{P::kPool, 1, -1, -1}}},
      // W=1: position 0 attends to nothing.
      {Fault::kWindowOffByOne, {{P::kOracle, 1, 0, 0}}},
      // W=2, one 3-token chunk: row 2 reads 3 keys (k2 twice); token by
      // token it reads k1, k2.
      {Fault::kWindowPerChunk, {{P::kOracle, 1, 0, 2}, {P::kChunking, 1, 0, 2}}},
      // W=1, a 2-token chunk: position 1's write is lost, the ring keeps k0.
      {Fault::kRingIndexUnwrapped, {{P::kOracle, 1, 0, 1}, {P::kCacheState, 1, 0, 1, 0, 0, 1, 1}}},
      // The shift of the one cached cell (call 2): its K (or V) is wrong.
      {Fault::kShiftKeepsK, {{P::kCacheState, 2, 0, 0, 0, 0, 0, 0}}},
      {Fault::kShiftRotatesV, {{P::kCacheState, 2, 0, 0, 0, 0, 0, 0}}},
      {Fault::kShiftWrongSign, {{P::kCacheState, 2, 0, 0, 0, 0, 0, 0}}},
      {Fault::kTruncateLate,
       {{P::kOracle, 3, 0, 0}, {P::kRollback, 3, 0, 0}, {P::kPoison, 2, -1, -1}}},
      {Fault::kTruncateAllNoop,
       {{P::kOracle, 3, 0, 0}, {P::kRollback, 3, 0, 0}, {P::kCacheState, 2, 0, 0, 0}}},
      {Fault::kTruncateKeepsLast,
       {{P::kOracle, 3, 0, 0}, {P::kRollback, 3, 0, 0}, {P::kCacheState, 2, 0, 0, 0}}},
      {Fault::kAbortFreesCached, {{P::kOracle, 4, 1, 1}, {P::kPool, 2, -1, -1}}},
      {Fault::kPrefixIgnoresKey, {{P::kPrefix, 3, 1, 0}}},
      {Fault::kHitPromptLogitsStale, {{P::kOracle, 4, 1, 0}, {P::kPrefix, 4, 1, 0}}},
      // The host copy lacks the one token: P6 reads it right after the
      // offload, P1 after the step that brings it back.
      {Fault::kOffloadBeforeWrite, {{P::kOracle, 3, 0, 1}, {P::kCacheState, 2, 0, 0, 0, 0, 0, 0}}},
      // The reload leaves the host block off its free list.
      {Fault::kOffloadCountsDrift, {{P::kPool, 3, -1, -1}}},
      // s0 saved empty, fed one token, restored: the faulty restore keeps
      // that token's cell. P6 sees it at the restore; the next token, at
      // position 1 instead of 0, differs from the oracle (P1) and from a
      // replay that never fed the first (P12).
      {Fault::kRestoreKeepsTail,
       {{P::kOracle, 4, 0, 0}, {P::kRollback, 4, 0, 0}, {P::kCacheState, 3, 0, 0, 0}}},
  };
  return cases;
}

TEST(Faults, EveryFaultHasACase) {
  EXPECT_EQ(fault_cases().size(), size_t(kFaultCount));
}

TEST(Faults, EachListedPropertyFailsAtTheRightPlaceAndTheCorrectEnginePasses) {
  for (const FaultCase& c : fault_cases()) {
    const Scenario scenario = minimal_fault_scenario(c.fault);
    ASSERT_EQ(scenario.validate(), "") << fault_name(c.fault);
    for (const Expected& e : c.caught) {
      SCOPED_TRACE(std::string(fault_name(c.fault)) + " " +
                   std::string(property_label(e.property)));
      for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
        const Verdict correct = check_property(
            e.property, scenario,
            EngineUnderTest(cpu_engine_factory({}, path), cpu_engine_traits_with_operations(path)));
        EXPECT_TRUE(correct.passed) << describe(correct);
        const Verdict v =
            check_property(e.property, scenario,
                           EngineUnderTest(cpu_engine_factory(FaultSet(c.fault), path),
                                           cpu_engine_traits_with_operations(path)));
        ASSERT_FALSE(v.passed) << describe(v);
        EXPECT_EQ(v.where.call, e.call) << describe(v);
        EXPECT_EQ(v.where.sequence, e.sequence) << describe(v);
        EXPECT_EQ(v.where.position, e.position) << describe(v);
        EXPECT_EQ(v.where.layer, e.layer) << describe(v);
        EXPECT_EQ(v.where.kv_head, e.kv_head) << describe(v);
        EXPECT_EQ(v.where.first_bad_position, e.first_bad) << describe(v);
        EXPECT_EQ(v.where.last_bad_position, e.last_bad) << describe(v);
        EXPECT_FALSE(v.detail.empty());
        if (e.property == Property::kOracle) {
          EXPECT_GT(v.worst_ratio, 1.0);
        }
      }
    }
  }
}

TEST(Faults, OracleReportsNonFiniteLogitsFirst) {
  // position_lag_after_first reads a poisoned slot: NaN, reported as such.
  const Verdict v =
      check_property(Property::kOracle, minimal_fault_scenario(Fault::kPositionLagAfterFirst),
                     cpu_engine_factory(FaultSet(Fault::kPositionLagAfterFirst)));
  ASSERT_FALSE(v.passed);
  EXPECT_NE(v.summary.find("non-finite"), std::string::npos) << v.summary;
  EXPECT_TRUE(std::isinf(v.worst_ratio));
}

TEST(Faults, CacheStateDetailHasTheLayerTable) {
  const Verdict v =
      check_property(Property::kCacheState, minimal_fault_scenario(Fault::kSharedLayerCache),
                     cpu_engine_factory(FaultSet(Fault::kSharedLayerCache)));
  ASSERT_FALSE(v.passed);
  EXPECT_NE(v.detail.find("per layer and position range"), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("!"), std::string::npos) << v.detail;
}

TEST(Faults, EveryFaultIsKilledOnTheRichScenario) {
  // A small kill matrix: both families, every KV dtype. rope_reapplied is
  // equivalent in gpt2 (no RoPE), so only llama must kill it.
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      const Scenario plain = rich_scenario(family, 4, 2, dtype);
      // The window faults on the same schedule with windows of 2 in the even
      // layers (every second layer global, Gemma's pattern).
      Scenario windowed = plain;
      windowed.config.sliding_window = 2;
      windowed.config.sliding_window_pattern = 2;
      for (int f = 0; f < kFaultCount; ++f) {
        const Fault fault = static_cast<Fault>(f);
        const Scenario& scenario = fault_needs(fault) == "sliding_window" ? windowed : plain;
        if (fault == Fault::kRopeReapplied && family == Family::kGpt2) continue;
        // The rich scenario has no fork, truncation, paged storage, prefix
        // cache, abort, erase, shift, offload, save or restore.
        if (fault_needs(fault) == "truncate" || fault_needs(fault) == "paged" ||
            fault_needs(fault) == "prefix_cache" || fault_needs(fault) == "abort" ||
            fault_needs(fault) == "cache_keys" || fault_needs(fault) == "prompt_logits" ||
            fault_needs(fault) == "shift" || fault_needs(fault) == "offload" ||
            fault_needs(fault) == "save_restore") {
          continue;
        }
        // The scale faults live in q8_0 storage only.
        if (fault_needs(fault) == "q8_0" && dtype != KvDtype::kQ8_0) continue;
        bool killed = false;
        for (int p = 0; p < kPropertyCount && !killed; ++p) {
          killed = !check_property(static_cast<Property>(p), scenario,
                                   EngineUnderTest(cpu_engine_factory(FaultSet(fault)),
                                                   cpu_engine_traits_with_operations()))
                        .passed;
        }
        EXPECT_TRUE(killed) << fault_name(fault) << " survives " << family_name(family) << " "
                            << kv_dtype_name(dtype);
      }
    }
  }
}

// An engine that returns one flipped low bit in one logit of one step on
// every second instance: within P1's tolerance, but not the same bits.
class FlakyEngine final : public Engine {
 public:
  FlakyEngine(std::unique_ptr<Engine> inner, bool flaky)
      : inner_(std::move(inner)), flaky_(flaky) {}
  const Config& config() const override { return inner_->config(); }
  const EngineOptions& options() const override { return inner_->options(); }
  std::string name() const override { return "flaky-" + inner_->name(); }
  SequenceId start() override { return inner_->start(); }
  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    inner_->step(batch, logits);
    if (flaky_ && ++steps_ == 2) logits[0] = std::nextafter(logits[0], INFINITY);
  }
  void finish(SequenceId s) override { inner_->finish(s); }
  void reset() override { inner_->reset(); }
  int length(SequenceId s) const override { return inner_->length(s); }
  CacheSnapshot cache(SequenceId s, int layer) const override { return inner_->cache(s, layer); }
  MemoryReport memory() const override { return inner_->memory(); }

 private:
  std::unique_ptr<Engine> inner_;
  bool flaky_;
  int steps_ = 0;
};

TEST(Faults, DeterminismCatchesAnEngineThatDiffersBetweenRuns) {
  std::atomic<int> instances = 0;
  const EngineFactory flaky = [&](const Config& c, const Weights& w, const EngineOptions& o) {
    return std::unique_ptr<Engine>(
        std::make_unique<FlakyEngine>(make_cpu_engine(c, w, o), instances++ % 2 == 1));
  };
  const Scenario scenario = rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  const Verdict v = check_property(Property::kDeterminism, scenario, flaky);
  ASSERT_FALSE(v.passed) << describe(v);
  // The second step (call 3) feeds s1 first: its position 5 holds logits[0].
  EXPECT_EQ(v.where.call, 3);
  EXPECT_EQ(v.where.sequence, 1);
  EXPECT_EQ(v.where.position, 5);
  EXPECT_NE(v.detail.find("0x"), std::string::npos) << v.detail;
  // One ulp is far inside the oracle tolerance: only bitwise checks see it.
  instances = 0;
  EXPECT_TRUE(check_property(Property::kOracle, scenario, flaky).passed);
}

}  // namespace
}  // namespace kvcheck::test
