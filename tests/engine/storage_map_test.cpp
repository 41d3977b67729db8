// The storage map the report's cache timeline draws: holders per row, and
// per slot data or poison, as the CPU engine's calls leave them.
#include <gtest/gtest.h>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

EngineOptions two_rows(KvDtype dtype, FaultSet faults = {}) {
  EngineOptions o;
  o.capacity = 6;
  o.max_rows = 2;
  o.kv_dtype = dtype;
  o.faults = faults;
  return o;
}

// "WWP..." per row: W written, P poisoned, M mixed.
std::string row_text(const StorageMap& map, int row) {
  std::string text;
  for (int s = 0; s < map.slots_per_unit; ++s) {
    const SlotState st = map.at(row, s);
    text += st == SlotState::kWritten ? 'W' : st == SlotState::kPoisoned ? 'P' : 'M';
  }
  return text;
}

class StorageMapTest : public testing::TestWithParam<KvDtype> {};

TEST_P(StorageMapTest, RowsFollowStartStepAndFinish) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 3);
  auto engine = make_cpu_engine(c, w, two_rows(GetParam()));
  std::optional<StorageMap> map = engine->storage_map();
  ASSERT_TRUE(map);
  EXPECT_EQ(map->units, 2);
  EXPECT_EQ(map->slots_per_unit, 6);
  EXPECT_EQ(row_text(*map, 0), "PPPPPP");
  EXPECT_TRUE(map->holders[0].empty());

  const SequenceId a = engine->start(), b = engine->start();
  feed(*engine, a, random_tokens(1, 3, c.vocab), {3});
  feed(*engine, b, random_tokens(2, 2, c.vocab), {1, 1});
  map = engine->storage_map();
  EXPECT_EQ(row_text(*map, 0), "WWWPPP");
  EXPECT_EQ(row_text(*map, 1), "WWPPPP");
  EXPECT_EQ(map->holders[0], std::vector<SequenceId>{a});
  EXPECT_EQ(map->holders[1], std::vector<SequenceId>{b});

  // Compaction moves b down into row 0 and poisons row 1 again.
  const uint64_t b_slot0 = map->digest_at(1, 0);
  engine->finish(a);
  map = engine->storage_map();
  EXPECT_EQ(row_text(*map, 0), "WWPPPP");
  EXPECT_EQ(row_text(*map, 1), "PPPPPP");
  EXPECT_EQ(map->holders[0], std::vector<SequenceId>{b});
  EXPECT_TRUE(map->holders[1].empty());
  EXPECT_EQ(map->digest_at(0, 0), b_slot0);

  engine->reset();
  map = engine->storage_map();
  EXPECT_EQ(row_text(*map, 0), "PPPPPP");
  EXPECT_TRUE(map->holders[0].empty());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, StorageMapTest,
                         testing::Values(KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16,
                                         KvDtype::kQ8_0));

// What the timeline shows for two faults: a reset that keeps the K/V leaves
// stale data no sequence holds; shared rows put two holders on one row.
TEST(StorageMap, ShowsTheFaultsItIsDrawnFor) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 3);
  auto engine = make_cpu_engine(c, w, two_rows(KvDtype::kF32, FaultSet(Fault::kResetKeepsKv)));
  feed(*engine, engine->start(), random_tokens(1, 2, c.vocab), {2});
  engine->reset();
  std::optional<StorageMap> map = engine->storage_map();
  EXPECT_EQ(row_text(*map, 0), "WWPPPP");
  EXPECT_TRUE(map->holders[0].empty());

  engine = make_cpu_engine(c, w, two_rows(KvDtype::kF32, FaultSet(Fault::kSharedRows)));
  const SequenceId a = engine->start(), b = engine->start();
  feed(*engine, a, random_tokens(1, 1, c.vocab), {1});
  map = engine->storage_map();
  EXPECT_EQ(map->holders[0], (std::vector<SequenceId>{a, b}));
  EXPECT_TRUE(map->holders[1].empty());
}

// Paged storage is drawn by block: a fork shares its parent's full blocks
// (two holders), and the slot the child writes next lands in a block of its own.
// The blocks b holds alone after a fork of a's 4 tokens (B = 2) and one
// more token fed to b.
int blocks_of_its_own_after_fork(FaultSet faults) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 3);
  EngineOptions o = two_rows(KvDtype::kF32, faults);
  o.block_size = 2;
  o.pool_blocks = 6;
  auto engine = make_cpu_engine(c, w, o);
  const SequenceId a = engine->start();
  feed(*engine, a, random_tokens(1, 3, c.vocab), {3});
  const SequenceId b = engine->fork(a, 3);
  feed(*engine, b, random_tokens(2, 1, c.vocab), {1});
  const std::optional<StorageMap> map = engine->storage_map();
  int own = 0;
  for (int u = 0; u < map->units; ++u) own += map->holders[size_t(u)] == std::vector<SequenceId>{b};
  return own;
}

// Copy on write of the shared partial block gives b a block of its own; the
// fault that skips the copy leaves b none, and the map shows it.
TEST(StorageMap, PagedMapShowsASkippedCopyOnWrite) {
  EXPECT_EQ(blocks_of_its_own_after_fork({}), 1);
  EXPECT_EQ(blocks_of_its_own_after_fork(FaultSet(Fault::kCowSkipped)), 0);
}

TEST(StorageMap, PagedBlocksShowSharingByForks) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 3);
  EngineOptions o = two_rows(KvDtype::kF32);
  o.block_size = 2;
  o.pool_blocks = 6;
  auto engine = make_cpu_engine(c, w, o);
  const SequenceId a = engine->start();
  feed(*engine, a, random_tokens(1, 4, c.vocab), {4});
  const SequenceId b = engine->fork(a, 4);
  std::optional<StorageMap> map = engine->storage_map();
  ASSERT_TRUE(map);
  EXPECT_EQ(map->unit, "block");
  EXPECT_EQ(map->slots_per_unit, 2);
  int shared = 0;
  for (int u = 0; u < map->units; ++u) shared += map->holders[size_t(u)].size() == 2;
  EXPECT_EQ(shared, 2);  // both of a's full blocks

  feed(*engine, b, random_tokens(2, 1, c.vocab), {1});
  map = engine->storage_map();
  int own_b = 0;
  for (int u = 0; u < map->units; ++u) {
    const auto& h = map->holders[size_t(u)];
    if (h == std::vector<SequenceId>{b}) {
      ++own_b;
      EXPECT_EQ(map->held_slots[size_t(u)], 1);
      EXPECT_EQ(row_text(*map, u), "WP");
    }
  }
  EXPECT_EQ(own_b, 1);
}

}  // namespace
}  // namespace kvcheck::test
