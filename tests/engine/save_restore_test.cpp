// Sequence state save and restore on the CPU engine (docs/OPERATIONS.md,
// "Save and restore"): a restore gives back the saved cache bytes and
// positions whatever happened since, the steps after it give the bits of a
// run that continued from the save, the cells it clears are poisoned, and
// the refusals (never saved, paged storage, a window) change nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

EngineOptions contiguous() {
  EngineOptions o;
  o.capacity = 16;
  o.max_rows = 3;
  return o;
}

std::vector<int32_t> part(const std::vector<int32_t>& tokens, size_t from, size_t n) {
  return {tokens.begin() + std::ptrdiff_t(from), tokens.begin() + std::ptrdiff_t(from + n)};
}

// 6 tokens, save; 3 more, a truncation of 5 and 2 other tokens; restore:
// the cache is the saved one, and 3 more tokens give the bits of a run that
// went on from the 6 tokens. A second restore changes nothing.
TEST(SaveRestore, ARestoreGivesTheSavedStateAndItsContinuation) {
  for (const ModelCase& m : model_cases()) {
    SCOPED_TRACE(m.name);
    const Weights w = init_weights(m.config, 5);
    const std::vector<int32_t> tokens = random_tokens(3, 14, m.config.vocab);
    auto plain = make_cpu_engine(m.config, w, contiguous());
    auto engine = make_cpu_engine(m.config, w, contiguous());
    const SequenceId a = plain->start(), b = engine->start();
    feed(*plain, a, part(tokens, 0, 6), {4, 2});
    feed(*engine, b, part(tokens, 0, 6), {4, 2});
    engine->save_state(b);
    const std::vector<uint8_t> saved = cache_bytes(*engine, b);
    feed(*engine, b, part(tokens, 6, 3), {3});
    engine->truncate(b, 5);
    feed(*engine, b, part(tokens, 9, 2), {1, 1});
    ASSERT_NE(cache_bytes(*engine, b), saved);
    engine->restore_state(b);
    EXPECT_EQ(engine->length(b), 6);
    EXPECT_EQ(cache_bytes(*engine, b), saved);
    EXPECT_EQ(engine->unheld_storage_check(), "");
    engine->restore_state(b);
    EXPECT_EQ(cache_bytes(*engine, b), saved);
    expect_bitwise(feed(*plain, a, part(tokens, 11, 3), {2, 1}),
                   feed(*engine, b, part(tokens, 11, 3), {2, 1}), "after the restore");
    EXPECT_EQ(cache_bytes(*plain, a), cache_bytes(*engine, b));
  }
}

// A context shift after the save is undone: the cells come back at their
// saved positions with their saved K.
TEST(SaveRestore, ARestoreUndoesAnEraseAndShift) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 6);
  auto engine = make_cpu_engine(c, w, contiguous());
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(4, 5, c.vocab), {5});
  engine->save_state(s);
  const std::vector<uint8_t> saved = cache_bytes(*engine, s);
  engine->erase(s, 1, 3);
  engine->shift(s, 3, c.max_pos, -2);
  ASSERT_NE(cache_bytes(*engine, s), saved);
  engine->restore_state(s);
  EXPECT_EQ(cache_bytes(*engine, s), saved);
  EXPECT_TRUE(engine->cache(s, 0).positions.empty() ||
              engine->cache(s, 0).positions == std::vector<int32_t>({0, 1, 2, 3, 4}));
}

// One saved state per sequence: a later save replaces it; a fork's child
// has none; other sequences' saves are their own; finish and reset drop it.
TEST(SaveRestore, EachSequenceKeepsItsOwnLastSave) {
  const Config c = gpt2_tiny();
  const Weights w = init_weights(c, 7);
  auto engine = make_cpu_engine(c, w, contiguous());
  const SequenceId t = engine->start(), s = engine->start();
  feed(*engine, s, random_tokens(5, 3, c.vocab), {3});
  feed(*engine, t, random_tokens(6, 2, c.vocab), {2});
  engine->save_state(s);
  engine->save_state(t);
  feed(*engine, s, random_tokens(7, 2, c.vocab), {2});
  engine->save_state(s);  // replaces the save at 3
  const std::vector<uint8_t> at_five = cache_bytes(*engine, s);
  engine->truncate(s, 4);
  engine->truncate(t, 2);
  engine->restore_state(s);
  engine->restore_state(t);
  EXPECT_EQ(engine->length(s), 5);
  EXPECT_EQ(cache_bytes(*engine, s), at_five);
  EXPECT_EQ(engine->length(t), 2);
  const SequenceId child = engine->fork(s, 5);
  EXPECT_THROW(engine->restore_state(child), EngineError);
  engine->finish(t);  // s and the child move down a row
  engine->restore_state(s);
  EXPECT_EQ(cache_bytes(*engine, s), at_five);
  engine->reset();
  const SequenceId fresh = engine->start();
  EXPECT_THROW(engine->restore_state(fresh), EngineError);
}

// The refusals: never saved, an unknown sequence, paged storage, a window;
// none changes the sequence.
TEST(SaveRestore, RefusalsChangeNothing) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 8);
  auto engine = make_cpu_engine(c, w, contiguous());
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(8, 3, c.vocab), {3});
  const std::vector<uint8_t> before = cache_bytes(*engine, s);
  try {
    engine->restore_state(s);
    ADD_FAILURE() << "a restore without a save was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kBadBatch);
    EXPECT_NE(std::string(e.what()).find("never saved"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache_bytes(*engine, s), before);
  try {
    engine->save_state(s + 100);
    ADD_FAILURE() << "a save of an unknown sequence was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kUnknownSequence);
  }
  EngineOptions paged = contiguous();
  paged.block_size = 2;
  auto blocks = make_cpu_engine(c, w, paged);
  const SequenceId p = blocks->start();
  EXPECT_THROW(blocks->save_state(p), EngineError);
  Config windowed = c;
  windowed.sliding_window = 2;
  auto ring = make_cpu_engine(windowed, init_weights(windowed, 8), contiguous());
  EXPECT_THROW(ring->save_state(ring->start()), EngineError);
}

}  // namespace
}  // namespace kvcheck::test
