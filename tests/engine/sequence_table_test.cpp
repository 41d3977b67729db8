// SequenceTable (engine/sequence_table.h) on its own, without an engine: the
// bookkeeping every engine shares was tested only through the CPU engine's
// logits, so a table bug showed as a wrong number far from its cause. Here
// each call's effect on rows, lengths, positions, blocks and reference
// counts is read back directly, together with the storage moves it asks the
// engine for (copy, clear, move, poison, rotate), and every refusal is
// checked to change nothing.
#include "engine/sequence_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <vector>

namespace kvcheck {
namespace {

using Move = std::tuple<int, int, int>;        // (from, to, slots) or (unit, first, end)
using Shift = std::tuple<int, int, int, int>;  // (row, from, to, slots)
using Rotation = std::tuple<int, int, int>;    // (row, slot, delta)

Config tiny_config() {
  Config c;
  c.vocab = 16;
  c.max_pos = 32;
  c.n_layers = 1;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.head_dim = 2;
  return c;
}

EngineOptions contiguous(int rows = 3) {
  EngineOptions o;
  o.capacity = 8;
  o.max_rows = rows;
  return o;
}

EngineOptions paged(int block_size, int pool_blocks = 0, int rows = 3) {
  EngineOptions o = contiguous(rows);
  o.block_size = block_size;
  o.pool_blocks = pool_blocks;
  return o;
}

// Records every storage move the table asks for.
struct Storage {
  std::vector<Move> copies, poisons;
  std::vector<std::pair<int, int>> row_copies;
  std::vector<int> clears;
  std::vector<Shift> moves;
  std::vector<Rotation> rotations;

  SequenceTable::CopySlots copy() {
    return [this](int from, int to, int n) { copies.emplace_back(from, to, n); };
  }
  SequenceTable::PoisonSlots poison() {
    return [this](int unit, int first, int end) { poisons.emplace_back(unit, first, end); };
  }
  SequenceTable::CopyRow copy_row() {
    return [this](int from, int to) { row_copies.emplace_back(from, to); };
  }
  SequenceTable::ClearRow clear() {
    return [this](int row) { clears.push_back(row); };
  }
  SequenceTable::MoveSlots move() {
    return [this](int row, int from, int to, int n) { moves.emplace_back(row, from, to, n); };
  }
  SequenceTable::RotateSlot rotate() {
    return [this](int row, int slot, int delta) { rotations.emplace_back(row, slot, delta); };
  }
};

// One step of `n` tokens (token ids 1..n) on `id`, as an engine drives the
// table: check, blocks, plan, commit. Returns the plan.
std::vector<TokenPlan> feed(SequenceTable& table, SequenceId id, int n, Storage& storage) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 1);
  const BatchEntry batch[] = {{id, tokens}};
  table.check_batch(batch);
  table.prepare_step(batch, storage.copy(), storage.poison());
  std::vector<TokenPlan> plan = table.make_plan(batch);
  table.commit(batch);
  return plan;
}

// A refusal: the kind, and the message names the call.
template <class F>
void expect_refused(F&& f, EngineError::Kind kind, const std::string& call) {
  try {
    f();
    ADD_FAILURE() << "no EngineError from " << call;
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(call + ":", 0), 0u) << e.what();
  }
}

int refcount(const SequenceTable& table, int block) {
  return table.pool_report().refcounts[size_t(block)];
}

TEST(SequenceTable, StartTakesLowestFreeRowAndStepAdvances) {
  SequenceTable table(tiny_config(), contiguous(2));
  Storage storage;
  const SequenceId a = table.start(), b = table.start();
  EXPECT_EQ(table.lookup(a, "t").row, 0);
  EXPECT_EQ(table.lookup(b, "t").row, 1);
  expect_refused([&] { table.start(); }, EngineError::Kind::kRows, "start");

  const std::vector<TokenPlan> first = feed(table, b, 3, storage);
  ASSERT_EQ(first.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first[size_t(i)].row, 1);
    EXPECT_EQ(first[size_t(i)].position, i);
    EXPECT_EQ(first[size_t(i)].slot, i);
    EXPECT_EQ(first[size_t(i)].n_keys, i + 1);
    EXPECT_EQ(first[size_t(i)].chunk_len, 3);
  }
  const std::vector<TokenPlan> second = feed(table, b, 1, storage);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].position, 3);
  EXPECT_EQ(second[0].n_keys, 4);
  EXPECT_EQ(table.lookup(b, "t").length, 4);
  EXPECT_EQ(table.lookup(b, "t").chunks, 2);
  EXPECT_EQ(table.held_slots(1), 4);
  EXPECT_EQ(table.held_slots(0), 0);
}

TEST(SequenceTable, StepRefusalsChangeNothing) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start();
  feed(table, a, 6, storage);
  const std::vector<int32_t> three{1, 2, 3}, bad{1, 99};
  const BatchEntry over[] = {{a, three}};  // 6 + 3 > capacity 8
  expect_refused([&] { table.check_batch(over); }, EngineError::Kind::kCapacity, "step");
  const BatchEntry twice[] = {{a, std::span(three).first(1)}, {a, std::span(three).first(1)}};
  expect_refused([&] { table.check_batch(twice); }, EngineError::Kind::kBadBatch, "step");
  const BatchEntry token[] = {{a, bad}};
  expect_refused([&] { table.check_batch(token); }, EngineError::Kind::kBadToken, "step");
  const BatchEntry unknown[] = {{a + 7, three}};
  expect_refused([&] { table.check_batch(unknown); }, EngineError::Kind::kUnknownSequence, "step");
  EXPECT_EQ(table.lookup(a, "t").length, 6);
  EXPECT_EQ(table.lookup(a, "t").chunks, 1);
}

TEST(SequenceTable, ContiguousForkCopiesThePrefixIntoANewRow) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId parent = table.start();
  feed(table, parent, 5, storage);
  const SequenceId child = table.fork(parent, 3, storage.copy());
  EXPECT_EQ(table.lookup(child, "t").row, 1);
  EXPECT_EQ(table.lookup(child, "t").length, 3);
  EXPECT_EQ(storage.copies, (std::vector<Move>{{0, 1, 3}}));
  EXPECT_EQ(table.held_slots(1), 3);
  // The child goes on at its own length; the parent is untouched.
  EXPECT_EQ(feed(table, child, 1, storage)[0].position, 3);
  EXPECT_EQ(table.lookup(parent, "t").length, 5);

  // n past the parent's length: refused, no row taken, nothing copied.
  expect_refused([&] { table.fork(parent, 6, storage.copy()); }, EngineError::Kind::kBadBatch,
                 "fork");
  EXPECT_EQ(storage.copies.size(), 1u);
  EXPECT_EQ(table.lookup(table.start(), "t").row, 2);
}

TEST(SequenceTable, ContiguousTruncatePoisonsTheTail) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start();
  feed(table, a, 5, storage);
  table.truncate(a, 2, storage.poison());
  EXPECT_EQ(table.lookup(a, "t").length, 3);
  EXPECT_EQ(storage.poisons, (std::vector<Move>{{0, 3, 5}}));
  EXPECT_EQ(table.held_slots(0), 3);
  EXPECT_EQ(feed(table, a, 1, storage)[0].position, 3);

  expect_refused([&] { table.truncate(a, 5, storage.poison()); }, EngineError::Kind::kBadBatch,
                 "truncate");
  EXPECT_EQ(table.lookup(a, "t").length, 4);
  EXPECT_EQ(storage.poisons.size(), 1u);
}

TEST(SequenceTable, PagedForkSharesBlocksAndCopiesOnWrite) {
  SequenceTable table(tiny_config(), paged(2));  // 3 rows * 4 blocks
  Storage storage;
  const SequenceId parent = table.start();
  feed(table, parent, 5, storage);  // blocks 0 1 2, the last one half full
  const std::vector<int> parent_blocks = table.lookup(parent, "t").blocks;
  ASSERT_EQ(parent_blocks.size(), 3u);

  // Fork at 3: the child shares the parent's first two blocks, copying nothing.
  const SequenceId child = table.fork(parent, 3, storage.copy());
  EXPECT_TRUE(storage.copies.empty());
  EXPECT_EQ(table.lookup(child, "t").blocks,
            (std::vector<int>{parent_blocks[0], parent_blocks[1]}));
  EXPECT_EQ(refcount(table, parent_blocks[0]), 2);
  EXPECT_EQ(refcount(table, parent_blocks[1]), 2);
  EXPECT_EQ(refcount(table, parent_blocks[2]), 1);

  // The child's next token lands in the shared, partly used block 1: it gets
  // a block of its own holding a copy of the one slot before it.
  const int free_before = table.pool_report().free;
  feed(table, child, 1, storage);
  const std::vector<int>& own = table.lookup(child, "t").blocks;
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0], parent_blocks[0]);
  EXPECT_NE(own[1], parent_blocks[1]);
  EXPECT_EQ(storage.copies, (std::vector<Move>{{parent_blocks[1], own[1], 1}}));
  EXPECT_EQ(refcount(table, parent_blocks[1]), 1);
  EXPECT_EQ(refcount(table, own[1]), 1);
  EXPECT_EQ(table.pool_report().free, free_before - 1);
  EXPECT_EQ(table.lookup(parent, "t").blocks, parent_blocks);
}

TEST(SequenceTable, PagedTruncateReleasesWhatNoOneHolds) {
  SequenceTable table(tiny_config(), paged(2));
  Storage storage;
  const SequenceId parent = table.start();
  feed(table, parent, 6, storage);  // three full blocks
  const std::vector<int> blocks = table.lookup(parent, "t").blocks;
  const SequenceId child = table.fork(parent, 4, storage.copy());  // shares blocks 0 and 1
  const int free_before = table.pool_report().free;

  // Back to 1 token: block 2 (parent's alone) is freed and poisoned whole;
  // block 1 (still the child's) stays, block 0 keeps its first slot.
  table.truncate(parent, 5, storage.poison());
  EXPECT_EQ(table.lookup(parent, "t").blocks, (std::vector<int>{blocks[0]}));
  EXPECT_EQ(refcount(table, blocks[2]), 0);
  EXPECT_EQ(refcount(table, blocks[1]), 1);
  EXPECT_EQ(refcount(table, blocks[0]), 2);
  EXPECT_EQ(table.pool_report().free, free_before + 1);
  const std::vector<Move>& p = storage.poisons;
  EXPECT_NE(std::find(p.begin(), p.end(), Move{blocks[2], 0, 2}), p.end());
  // Block 0 is still the child's up to its end: nothing of it is poisoned.
  EXPECT_EQ(table.held_slots(blocks[0]), 2);
  EXPECT_EQ(table.lookup(child, "t").length, 4);
}

TEST(SequenceTable, EraseMovesLaterCellsDownAndKeepsTheirPositions) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start();
  feed(table, a, 6, storage);
  table.erase(a, 1, 3, storage.move(), storage.poison());
  const SequenceState& s = table.lookup(a, "t");
  EXPECT_EQ(s.length, 4);
  EXPECT_EQ(s.positions, (std::vector<int32_t>{0, 3, 4, 5}));
  EXPECT_EQ(storage.moves, (std::vector<Shift>{{0, 3, 1, 3}}));
  EXPECT_EQ(storage.poisons, (std::vector<Move>{{0, 4, 6}}));
  // The next token goes to cell 4 at position 6 (largest held + 1).
  const std::vector<TokenPlan> next = feed(table, a, 1, storage);
  EXPECT_EQ(next[0].slot, 4);
  EXPECT_EQ(next[0].position, 6);

  // A range holding no cell changes nothing at all.
  storage.moves.clear();
  storage.poisons.clear();
  table.erase(a, 1, 3, storage.move(), storage.poison());
  EXPECT_TRUE(storage.moves.empty());
  EXPECT_TRUE(storage.poisons.empty());
  EXPECT_EQ(table.lookup(a, "t").length, 5);
}

TEST(SequenceTable, ShiftRotatesTheMovedCellsOnly) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start();
  feed(table, a, 4, storage);
  table.shift(a, 2, 4, 10, storage.rotate());
  EXPECT_EQ(table.lookup(a, "t").positions, (std::vector<int32_t>{0, 1, 12, 13}));
  EXPECT_EQ(storage.rotations, (std::vector<Rotation>{{0, 2, 10}, {0, 3, 10}}));
  EXPECT_EQ(feed(table, a, 1, storage)[0].position, 14);
  // And back down: positions are what cells hold, not their index.
  table.shift(a, 12, 15, -10, storage.rotate());
  EXPECT_EQ(table.lookup(a, "t").positions, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(SequenceTable, EraseAndShiftRefusalsChangeNothing) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start();
  feed(table, a, 4, storage);
  const auto unchanged = [&] {
    const SequenceState& s = table.lookup(a, "t");
    EXPECT_EQ(s.length, 4);
    EXPECT_TRUE(s.positions.empty());
    EXPECT_TRUE(storage.moves.empty());
    EXPECT_TRUE(storage.poisons.empty());
    EXPECT_TRUE(storage.rotations.empty());
  };
  using K = EngineError::Kind;
  expect_refused([&] { table.erase(a, 3, 1, storage.move(), storage.poison()); }, K::kBadBatch,
                 "erase");
  expect_refused([&] { table.erase(a, -1, 2, storage.move(), storage.poison()); }, K::kBadBatch,
                 "erase");
  // Cells 0 and 1 moved onto 2 and 3, which stay: two cells at one position.
  expect_refused([&] { table.shift(a, 0, 2, 2, storage.rotate()); }, K::kBadBatch, "shift");
  // Below 0 and up to max_pos (32).
  expect_refused([&] { table.shift(a, 0, 4, -1, storage.rotate()); }, K::kBadBatch, "shift");
  expect_refused([&] { table.shift(a, 3, 4, 29, storage.rotate()); }, K::kBadBatch, "shift");
  unchanged();

  // Paged storage: this engine refuses both.
  SequenceTable paged_table(tiny_config(), paged(2));
  const SequenceId b = paged_table.start();
  feed(paged_table, b, 4, storage);
  expect_refused([&] { paged_table.erase(b, 0, 1, storage.move(), storage.poison()); },
                 K::kBadBatch, "erase");
  expect_refused([&] { paged_table.shift(b, 0, 1, 1, storage.rotate()); }, K::kBadBatch, "shift");
  EXPECT_EQ(paged_table.lookup(b, "t").length, 4);
  unchanged();
}

TEST(SequenceTable, FinishCompactsRowsAndClearsTheLast) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start(), b = table.start(), c = table.start();
  feed(table, a, 1, storage);
  feed(table, b, 2, storage);
  feed(table, c, 3, storage);
  table.finish(a, storage.copy_row(), storage.clear());
  EXPECT_EQ(storage.row_copies, (std::vector<std::pair<int, int>>{{1, 0}, {2, 1}}));
  EXPECT_EQ(storage.clears, (std::vector<int>{2}));
  EXPECT_EQ(table.lookup(b, "t").row, 0);
  EXPECT_EQ(table.lookup(c, "t").row, 1);
  EXPECT_EQ(table.held_slots(0), 2);
  EXPECT_EQ(table.held_slots(1), 3);
  EXPECT_EQ(table.held_slots(2), 0);
  expect_refused([&] { table.lookup(a, "step"); }, EngineError::Kind::kUnknownSequence, "step");
  // The freed row is taken again, by a sequence that starts at 0.
  const SequenceId d = table.start();
  EXPECT_EQ(table.lookup(d, "t").row, 2);
  EXPECT_EQ(feed(table, d, 1, storage)[0].position, 0);
}

TEST(SequenceTable, ResetClearsEveryRow) {
  SequenceTable table(tiny_config(), contiguous());
  Storage storage;
  const SequenceId a = table.start(), b = table.start();
  feed(table, a, 2, storage);
  feed(table, b, 3, storage);
  table.reset(storage.clear());
  EXPECT_EQ(storage.clears, (std::vector<int>{0, 1, 2}));
  expect_refused([&] { table.lookup(a, "step"); }, EngineError::Kind::kUnknownSequence, "step");
  expect_refused([&] { table.lookup(b, "step"); }, EngineError::Kind::kUnknownSequence, "step");
  const SequenceId c = table.start();
  EXPECT_EQ(table.lookup(c, "t").row, 0);
  EXPECT_EQ(feed(table, c, 1, storage)[0].position, 0);
  EXPECT_EQ(table.held_slots(1), 0);
}

TEST(SequenceTable, PagedFinishAndResetReturnEveryBlock) {
  SequenceTable table(tiny_config(), paged(2));
  Storage storage;
  const int total = table.pool_report().total;
  const SequenceId a = table.start();
  feed(table, a, 5, storage);
  const SequenceId b = table.fork(a, 4, storage.copy());
  feed(table, b, 1, storage);
  EXPECT_EQ(table.pool_report().free, total - 4);  // a: 3 blocks; b: 2 shared + 1 own

  // Finishing a keeps what b holds; the rest goes back, poisoned.
  const std::vector<int> a_blocks = table.lookup(a, "t").blocks;
  table.finish_paged(a, storage.poison());
  EXPECT_EQ(table.pool_report().free, total - 3);
  EXPECT_EQ(refcount(table, a_blocks[0]), 1);
  EXPECT_EQ(refcount(table, a_blocks[2]), 0);
  const std::vector<Move>& p = storage.poisons;
  EXPECT_NE(std::find(p.begin(), p.end(), Move{a_blocks[2], 0, 2}), p.end());

  table.reset_paged(storage.poison());
  const PoolReport after = table.pool_report();
  EXPECT_EQ(after.free, total);
  EXPECT_EQ(after.used, 0);
  EXPECT_TRUE(after.tables.empty());
  for (const int count : after.refcounts) EXPECT_EQ(count, 0);
  EXPECT_EQ(table.lookup(table.start(), "t").row, 0);
}

TEST(SequenceTable, RefusedAllocationLeavesNothingHalfDone) {
  SequenceTable table(tiny_config(), paged(2, 3));  // a pool of 3 blocks
  Storage storage;
  const SequenceId a = table.start(), b = table.start();
  feed(table, a, 2, storage);  // 1 block, 2 left
  // a wants 2 more blocks, b 2: 4 > 2. Nothing may be taken for a first.
  const std::vector<int32_t> four{1, 2, 3, 4};
  const BatchEntry batch[] = {{a, four}, {b, four}};
  table.check_batch(batch);
  expect_refused([&] { table.prepare_step(batch, storage.copy(), storage.poison()); },
                 EngineError::Kind::kCapacity, "step");
  const PoolReport after = table.pool_report();
  EXPECT_EQ(after.free, 2);
  EXPECT_EQ(after.used, 1);
  EXPECT_EQ(table.lookup(a, "t").blocks.size(), 1u);
  EXPECT_TRUE(table.lookup(b, "t").blocks.empty());
  EXPECT_EQ(table.lookup(a, "t").length, 2);
  // What fits still runs.
  feed(table, b, 4, storage);
  EXPECT_EQ(table.pool_report().free, 0);
}

}  // namespace
}  // namespace kvcheck
