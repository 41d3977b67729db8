// The operations of docs/OPERATIONS.md on the CPU engine: paged storage
// gives the same bits as contiguous storage, a fork child is the oracle on
// the parent's prefix plus its own tokens, a truncated sequence is the oracle
// on what remains, a pool refusal changes nothing, and freed storage is
// poisoned again.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

// One script of every operation: two prompts, a fork mid-block and one at
// the parent's end, truncations across blocks and to 0, refeeds, a finish.
// Returns every logit it produced, in call order.
std::vector<float> run_script(const Config& c, const Weights& w, EngineOptions o) {
  auto engine = make_cpu_engine(c, w, o);
  const std::vector<int32_t> tokens = random_tokens(5, 40, c.vocab);
  std::vector<float> all;
  size_t next = 0;
  const auto feed_n = [&](SequenceId s, int n) {
    std::vector<int> chunks = {n};
    const std::vector<int32_t> part(tokens.begin() + std::ptrdiff_t(next),
                                    tokens.begin() + std::ptrdiff_t(next + size_t(n)));
    next += size_t(n);
    const std::vector<float> logits = feed(*engine, s, part, chunks);
    all.insert(all.end(), logits.begin(), logits.end());
  };
  const SequenceId a = engine->start();
  feed_n(a, 7);
  const SequenceId b = engine->fork(a, 5);  // mid-block for most B
  feed_n(b, 3);
  feed_n(a, 2);
  const SequenceId d = engine->fork(a, engine->length(a));
  engine->truncate(a, 6);  // across blocks
  feed_n(a, 4);
  feed_n(d, 1);
  engine->truncate(b, engine->length(b));  // to 0
  feed_n(b, 2);
  engine->finish(a);
  feed_n(d, 2);
  feed_n(b, 1);
  return all;
}

TEST(Operations, PagedStorageGivesTheSameBitsAsContiguous) {
  for (const ModelCase& m : model_cases()) {
    const Weights w = init_weights(m.config, 3);
    for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
      for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kQ8_0}) {
        EngineOptions o;
        o.capacity = 24;
        o.max_rows = 4;
        o.kernels = path;
        o.kv_dtype = dtype;
        const std::vector<float> contiguous = run_script(m.config, w, o);
        for (int block : {1, 2, 3, 5, 16, 32}) {
          o.block_size = block;
          expect_bitwise(contiguous, run_script(m.config, w, o),
                         m.name + " block " + std::to_string(block));
        }
        o.block_size = 0;
      }
    }
  }
}

// The oracle needs no cache: a fork child's logits are those of its content
// (the parent's first n tokens, then its own) on a fresh sequence, and a
// truncated sequence's are those of what remains; the in-tree engine keeps
// both bitwise, and both are within the derived bound of the oracle.
TEST(Operations, ForkAndTruncateAreTheOracleOnTheContent) {
  const Config c = model_cases()[3].config;  // llama MHA
  const Weights w = init_weights(c, 9);
  for (int block : {0, 4}) {
    EngineOptions o;
    o.capacity = 16;
    o.block_size = block;
    auto engine = make_cpu_engine(c, w, o);
    const std::vector<int32_t> prompt = random_tokens(1, 9, c.vocab);
    const std::vector<int32_t> own = random_tokens(2, 3, c.vocab);
    const SequenceId parent = engine->start();
    feed(*engine, parent, prompt, {9});
    const SequenceId child = engine->fork(parent, 6);
    const std::vector<float> child_logits = feed(*engine, child, own, {2, 1});
    std::vector<int32_t> content(prompt.begin(), prompt.begin() + 6);
    content.insert(content.end(), own.begin(), own.end());
    const std::vector<float> fresh = solo_run(c, w, o, content);
    const size_t V = size_t(c.vocab);
    expect_bitwise(std::vector<float>(fresh.begin() + 6 * std::ptrdiff_t(V), fresh.end()),
                   child_logits, "fork child vs its content on a fresh engine");
    expect_matches_oracle(c, w, o.kv_dtype, content, std::vector<float>(fresh.begin(), fresh.end()),
                          "fork content");

    engine->truncate(parent, 4);  // keeps 5
    const std::vector<float> refed = feed(*engine, parent, own, {3});
    std::vector<int32_t> kept(prompt.begin(), prompt.begin() + 5);
    kept.insert(kept.end(), own.begin(), own.end());
    const std::vector<float> never = solo_run(c, w, o, kept);
    expect_bitwise(std::vector<float>(never.begin() + 5 * std::ptrdiff_t(V), never.end()), refed,
                   "truncate-then-refeed vs never fed");
    EXPECT_EQ(engine->length(parent), 8);
    EXPECT_EQ(engine->length(child), 9);
  }
}

TEST(Operations, BadArgumentsAreRefusedAndChangeNothing) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  EngineOptions o;
  o.capacity = 8;
  o.max_rows = 2;
  o.block_size = 2;
  auto engine = make_cpu_engine(c, w, o);
  const SequenceId a = engine->start();
  feed(*engine, a, random_tokens(1, 3, c.vocab), {3});
  EXPECT_THROW(engine->fork(a, 4), EngineError);
  EXPECT_THROW(engine->truncate(a, 4), EngineError);
  EXPECT_THROW(engine->truncate(a, -1), EngineError);
  EXPECT_THROW(engine->fork(99, 0), EngineError);
  const SequenceId b = engine->fork(a, 3);
  try {
    engine->fork(a, 1);
    ADD_FAILURE() << "a fork past max_rows was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kRows);
  }
  EXPECT_EQ(engine->length(a), 3);
  EXPECT_EQ(engine->length(b), 3);
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(Operations, APoolRefusalChangesNothing) {
  const Config c = model_cases()[0].config;
  const Weights w = init_weights(c, 1);
  EngineOptions o;
  o.capacity = 8;
  o.max_rows = 2;
  o.block_size = 2;
  o.pool_blocks = 3;
  auto engine = make_cpu_engine(c, w, o);
  const SequenceId a = engine->start();
  feed(*engine, a, random_tokens(1, 3, c.vocab), {3});  // 2 blocks
  const SequenceId b = engine->fork(a, 3);              // shares both
  const PoolReport before = engine->pool();
  EXPECT_EQ(before.used, 2);
  EXPECT_EQ(before.free, 1);
  // b's write into the shared partial block needs a copy (1 block), and
  // three more tokens need another: 2 > 1 free.
  const std::vector<int32_t> more = random_tokens(2, 3, c.vocab);
  std::vector<float> logits;
  const BatchEntry entry{b, more};
  try {
    engine->step(std::span<const BatchEntry>(&entry, 1), logits);
    ADD_FAILURE() << "the pool ran dry, yet the step was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kCapacity);
    EXPECT_NE(std::string(e.what()).find("pool"), std::string::npos) << e.what();
  }
  const PoolReport after = engine->pool();
  EXPECT_EQ(after.refcounts, before.refcounts);
  EXPECT_EQ(after.tables, before.tables);
  EXPECT_EQ(after.free, before.free);
  EXPECT_EQ(engine->length(b), 3);
  // One token fits (the copy of the partial block), and b continues.
  feed(*engine, b, {more[0]}, {1});
  EXPECT_EQ(engine->pool().free, 0);
  engine->finish(a);
  engine->finish(b);
  EXPECT_EQ(engine->pool().free, 3);
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

// Reset and finish re-poison what they free, in every layer; a reset that
// clears layer 0 only leaves the other layers' K/V readable.
TEST(Operations, ResetAndFinishRepoisonEveryLayer) {
  const Config c = model_cases()[1].config;  // 2 layers
  ASSERT_GE(c.n_layers, 2);
  const Weights w = init_weights(c, 1);
  for (int block : {0, 2}) {
    EngineOptions o;
    o.capacity = 8;
    o.max_rows = 2;
    o.block_size = block;
    auto engine = make_cpu_engine(c, w, o);
    const SequenceId a = engine->start();
    const SequenceId b = engine->start();
    feed(*engine, a, random_tokens(1, 3, c.vocab), {3});
    feed(*engine, b, random_tokens(2, 3, c.vocab), {3});
    EXPECT_EQ(engine->unheld_storage_check(), "");
    engine->finish(a);
    EXPECT_EQ(engine->unheld_storage_check(), "") << "after finish, block " << block;
    engine->reset();
    EXPECT_EQ(engine->unheld_storage_check(), "") << "after reset, block " << block;

    o.faults = FaultSet(Fault::kResetClearsLayer0Only);
    auto faulty = make_cpu_engine(c, w, o);
    feed(*faulty, faulty->start(), random_tokens(1, 3, c.vocab), {3});
    faulty->reset();
    const std::string found = faulty->unheld_storage_check();
    EXPECT_NE(found.find("layer 1"), std::string::npos) << found;
  }
}

}  // namespace
}  // namespace kvcheck::test
