// The prefix cache of docs/OPERATIONS.md on the CPU engine: a hit reuses
// whole cached blocks (tokens compared, not only a hash), leaves at least the
// last token to compute, gives a cold run's bits, keeps finished prompts
// cached until evicted least recently used first or flushed, copies a
// registered block before writing into it, and poisons what it frees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

EngineOptions prefix_options(int block, int pool) {
  EngineOptions o;
  o.capacity = 32;
  o.max_rows = 4;
  o.block_size = block;
  o.pool_blocks = pool;
  o.prefix_cache = true;
  return o;
}

// Feeds one chunk; returns its logits.
std::vector<float> step_one(Engine& engine, SequenceId s, const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  const BatchEntry entry{s, tokens};
  engine.step(std::span<const BatchEntry>(&entry, 1), logits);
  return logits;
}

bool row_is_nan(const std::vector<float>& logits, int row, int vocab) {
  for (int j = 0; j < vocab; ++j) {
    if (!std::isnan(logits[size_t(row) * size_t(vocab) + size_t(j)])) return false;
  }
  return true;
}

TEST(PrefixCache, AHitReusesWholeBlocksAndGivesTheColdBits) {
  for (const ModelCase& m : model_cases()) {
    const Weights w = init_weights(m.config, 2);
    const int V = m.config.vocab;
    for (int block : {1, 2, 4}) {
      const std::vector<int32_t> prompt = random_tokens(7, 11, V);
      auto engine = make_cpu_engine(m.config, w, prefix_options(block, 0));
      const SequenceId a = engine->start();
      step_one(*engine, a, prompt);
      engine->finish(a);
      // Cold: a fresh engine, no prefix cache.
      EngineOptions cold_options = prefix_options(block, 0);
      cold_options.prefix_cache = false;
      auto cold = make_cpu_engine(m.config, w, cold_options);
      const SequenceId c = cold->start();
      const std::vector<float> expected = step_one(*cold, c, prompt);

      const SequenceId b = engine->start();
      const std::vector<float> got = step_one(*engine, b, prompt);
      const int k = engine->reused(b);
      // Whole cached blocks, at most n - 1 = 10 tokens of them.
      EXPECT_EQ(k, std::min((11 / block) * block, 10)) << m.name << " B=" << block;
      for (int row = 0; row < 11; ++row) {
        if (row < k) {
          EXPECT_TRUE(row_is_nan(got, row, V)) << "reused row " << row;
          continue;
        }
        EXPECT_EQ(std::memcmp(got.data() + size_t(row) * V, expected.data() + size_t(row) * V,
                              size_t(V) * sizeof(float)),
                  0)
            << m.name << " B=" << block << " row " << row;
      }
      // The cache holds the cold K/V bit for bit, reused slots included.
      for (int layer = 0; layer < m.config.n_layers; ++layer) {
        EXPECT_EQ(engine->cache(b, layer).k, cold->cache(c, layer).k);
        EXPECT_EQ(engine->cache(b, layer).v, cold->cache(c, layer).v);
      }
      // Decoding on after the hit: the same bits as the cold engine.
      const std::vector<int32_t> next = {static_cast<int32_t>(3 % V)};
      EXPECT_EQ(step_one(*engine, b, next), step_one(*cold, c, next));
      EXPECT_EQ(engine->unheld_storage_check(), "");
    }
  }
}

TEST(PrefixCache, TokensAreComparedAndOnlyLeadingWholeBlocksMatch) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 0));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4, 5});  // blocks [1 2] [3 4] registered, [5] partial
  EXPECT_EQ(engine->pool().used, 3);
  // Shares the first block only: the second differs in its last token.
  const SequenceId b = engine->start();
  step_one(*engine, b, {1, 2, 3, 9, 7});
  EXPECT_EQ(engine->reused(b), 2);
  // The whole chunk is cached: every token but the last is reused; the last
  // block is shared, then copied before the last token is written.
  const SequenceId d = engine->start();
  const std::vector<int> a_table = engine->pool().tables[0].second;
  step_one(*engine, d, {1, 2, 3, 4});
  EXPECT_EQ(engine->reused(d), 3);
  const PoolReport r = engine->pool();
  const std::vector<int>& d_table = r.tables.back().second;
  ASSERT_EQ(d_table.size(), 2u);
  EXPECT_EQ(d_table[0], a_table[0]);
  EXPECT_NE(d_table[1], a_table[1]) << "the registered block was written in place";
  EXPECT_EQ(engine->unheld_storage_check(), "");
  // A first block that differs: no hit, even though later blocks match.
  engine->finish(d);
  const SequenceId e = engine->start();
  step_one(*engine, e, {0, 2, 3, 4, 5});
  EXPECT_EQ(engine->reused(e), 0);
  // A sequence that already holds tokens never hits.
  step_one(*engine, e, {1, 2, 3});
  EXPECT_EQ(engine->reused(e), 0);
}

TEST(PrefixCache, FinishedPromptsStayCachedUntilEvictedLeastRecentlyUsedFirst) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 4));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3});  // [1 2] registered, [3] partial
  engine->finish(a);
  PoolReport r = engine->pool();
  EXPECT_EQ(r.cached, 1);
  EXPECT_EQ(r.free, 3);
  EXPECT_EQ(r.used, 0);
  const SequenceId b = engine->start();
  step_one(*engine, b, {5, 6, 7, 8});  // [5 6] [7 8] registered
  engine->finish(b);
  r = engine->pool();
  EXPECT_EQ(r.cached, 3);
  EXPECT_EQ(r.free, 1);
  EXPECT_EQ(engine->unheld_storage_check(), "");
  // Three new blocks: one free, then the least recently used cached ones
  // ([1 2], then [5 6] with [7 8], which chains after it and goes too).
  const SequenceId d = engine->start();
  step_one(*engine, d, {9, 9, 9, 9, 9});
  r = engine->pool();
  EXPECT_EQ(r.used, 3);
  EXPECT_EQ(r.cached + r.free, 1);
  EXPECT_EQ(r.free + r.used + r.cached, r.total);
  EXPECT_EQ(engine->unheld_storage_check(), "");
  engine->finish(d);
  const SequenceId e = engine->start();
  step_one(*engine, e, {1, 2, 3});
  EXPECT_EQ(engine->reused(e), 0) << "[1 2] was evicted first (least recently used)";
}

TEST(PrefixCache, FlushFreesEveryCachedBlockPoisoned) {
  const Config c = model_cases()[1].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 0));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4, 5});
  const SequenceId b = engine->start();
  step_one(*engine, b, {1, 2, 3, 4, 6});
  EXPECT_EQ(engine->reused(b), 4);
  engine->finish(a);
  engine->flush_prefix_cache();
  PoolReport r = engine->pool();
  EXPECT_EQ(r.cached, 0);
  EXPECT_EQ(r.used, 3);  // b still holds the two shared blocks and its own
  EXPECT_EQ(engine->unheld_storage_check(), "");
  engine->finish(b);
  r = engine->pool();
  EXPECT_EQ(r.free, r.total) << "nothing is registered any more: every block is free";
  EXPECT_EQ(engine->unheld_storage_check(), "");
  const SequenceId d = engine->start();
  step_one(*engine, d, {1, 2, 3, 4, 5});
  EXPECT_EQ(engine->reused(d), 0);
}

TEST(PrefixCache, ATruncationIntoARegisteredBlockHeldAloneTakesItOutOfTheCache) {
  // Its tail is about to be rewritten; copying it would need a block the
  // default pool does not have (corpus/regressions/truncate_into_cached_block).
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 0));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4});  // both blocks registered, held by a alone
  const std::vector<int> table = engine->pool().tables[0].second;
  engine->truncate(a, 1);  // length 3: slot 3 of the registered [3 4] is no longer a's
  EXPECT_EQ(engine->unheld_storage_check(), "");  // slot 3 is poisoned now
  step_one(*engine, a, {7});
  EXPECT_EQ(engine->pool().tables[0].second, table) << "written in place, not copied";
  EXPECT_EQ(engine->pool().cached, 0);
  const SequenceId b = engine->start();
  step_one(*engine, b, {1, 2, 3, 4, 5});
  EXPECT_EQ(engine->reused(b), 2) << "only [1 2] is still cached";
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(PrefixCache, AWriteIntoARegisteredBlockOthersHoldCopiesItFirst) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 0));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4});       // both blocks registered
  const SequenceId b = engine->fork(a, 4);  // b shares both
  const std::vector<int> table = engine->pool().tables[0].second;
  engine->truncate(a, 1);
  step_one(*engine, a, {7});
  const std::vector<int> after = engine->pool().tables[0].second;
  EXPECT_EQ(after[0], table[0]);
  EXPECT_NE(after[1], table[1]) << "a write into a registered block must copy it first";
  engine->finish(b);
  EXPECT_EQ(engine->pool().cached, 1);  // the old [3 4] stays cached, intact
  const SequenceId d = engine->start();
  step_one(*engine, d, {1, 2, 3, 4, 5});
  EXPECT_EQ(engine->reused(d), 4);
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(PrefixCache, AFlushPoisonsTheTailOfAHeldBlockATruncationLeft) {
  // Found by P14 (property_test, seed 2255273001695342541): a registered block
  // keeps the slots a truncation gave up (the cache holds them); once the
  // flush unregisters it, they are nobody's and must be poisoned.
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(4, 0));
  const SequenceId a = engine->start();
  step_one(*engine, a, {7, 3, 3, 7, 3});
  engine->truncate(a, 2);  // length 3 inside the registered [7 3 3 7]
  EXPECT_EQ(engine->unheld_storage_check(), "");
  engine->flush_prefix_cache();
  EXPECT_EQ(engine->unheld_storage_check(), "");
  EXPECT_EQ(engine->length(a), 3);
}

TEST(PrefixCache, ARefusalChangesNothingAndProtectsTheHitBlocks) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 3));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4});
  engine->finish(a);  // 2 cached, 1 free
  const SequenceId b = engine->start();
  const PoolReport before = engine->pool();
  // Hits [1 2] [3 4], needs 3 more blocks for 6 tokens: only 1 free, and the
  // hit blocks cannot be evicted for it.
  try {
    step_one(*engine, b, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    ADD_FAILURE() << "the pool ran dry, yet the step was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kCapacity);
  }
  const PoolReport after = engine->pool();
  EXPECT_EQ(after.refcounts, before.refcounts);
  EXPECT_EQ(after.tables, before.tables);
  EXPECT_EQ(after.cached, before.cached);
  EXPECT_EQ(engine->length(b), 0);
  // Fits: one hit block, one new.
  step_one(*engine, b, {1, 2, 3});
  EXPECT_EQ(engine->reused(b), 2);
}

TEST(PrefixCache, AFullHitWithoutRoomForTheCopyStopsABlockEarlier) {
  // Found by a campaign on cpu?paged=2&prefix=1: the copy of a fully cached
  // chunk's last block is one block beyond the sequence's share, so a full
  // pool must not refuse for it (the default pool never runs dry).
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  auto engine = make_cpu_engine(c, w, prefix_options(2, 2));
  const SequenceId a = engine->start();
  step_one(*engine, a, {1, 2, 3, 4});
  engine->finish(a);  // both blocks cached, none free
  const SequenceId b = engine->start();
  step_one(*engine, b, {1, 2, 3, 4});
  EXPECT_EQ(engine->reused(b), 2) << "one block reused, the second recomputed in its place";
  const PoolReport r = engine->pool();
  EXPECT_EQ(r.used, 2);
  EXPECT_EQ(r.free + r.cached, 0);
  EXPECT_EQ(engine->unheld_storage_check(), "");
  // A one-token chunk reuses nothing, even when its token is cached.
  engine->finish(b);
  const SequenceId d = engine->start();
  step_one(*engine, d, {1});
  EXPECT_EQ(engine->reused(d), 0);
}

TEST(PrefixCache, AFaultThatEmptiesThePoolIsARefusalNotAWriteOutOfBounds) {
  // Found by `kvcheck campaign --fault freed_block_still_referenced --seed 5`:
  // the fault frees a block a fork still holds, a reset frees it again, and
  // the free list then counts blocks twice. Allocating past its real end
  // evicted block -1 and registered block -1 (a segfault); now the engine
  // refuses the step, which the properties report (P8 here).
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  EngineOptions o = prefix_options(1, 5);
  o.capacity = 7;
  o.max_rows = 2;
  o.faults = FaultSet(Fault::kFreedBlockStillReferenced);
  auto engine = make_cpu_engine(c, w, o);
  const SequenceId s0 = engine->start();
  step_one(*engine, s0, {7, 7});
  step_one(*engine, s0, {4});
  const SequenceId s2 = engine->fork(s0, 3);
  std::vector<float> logits;
  const std::vector<int32_t> two = {2}, five = {5}, four = {4};
  const BatchEntry both[] = {{s0, two}, {s2, four}};
  engine->step(both, logits);
  engine->finish(s0);
  step_one(*engine, s2, five);
  engine->reset();
  const SequenceId s1 = engine->start();
  try {
    step_one(*engine, s1, {7, 7, 4, 2, 3, 2});
    ADD_FAILURE() << "the faulty pool is dry, yet the step was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kCapacity);
    EXPECT_NE(std::string(e.what()).find("ran dry"), std::string::npos) << e.what();
  }
}

TEST(PrefixCache, OptionsAreChecked) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  EngineOptions o = prefix_options(0, 0);  // contiguous storage
  try {
    make_cpu_engine(c, w, o);
    ADD_FAILURE() << "a prefix cache on contiguous storage was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("prefix_cache"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvcheck::test
