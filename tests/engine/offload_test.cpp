// The second memory tier on the CPU engine (docs/OPERATIONS.md, "Offload"):
// an offload and the step that brings the blocks back give the bits of a
// run that never offloaded, snapshots read whichever tier holds the data,
// a shared block moves once for every holder, each tier's counts add up,
// and the refusals (host tier full, device pool too full to bring blocks
// back, no host tier) change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

EngineOptions tiered(int block_size, int pool_blocks, int host_blocks) {
  EngineOptions o;
  o.capacity = 16;
  o.max_rows = 4;
  o.block_size = block_size;
  o.pool_blocks = pool_blocks;
  o.host_blocks = host_blocks;
  return o;
}

std::string counts(const PoolReport& r) {
  return std::to_string(r.free) + "/" + std::to_string(r.used) + "/" + std::to_string(r.cached) +
         " host " + std::to_string(r.host_free) + "/" + std::to_string(r.host_used) + "/" +
         std::to_string(r.host_cached);
}

// 7 tokens, offload, 3 more (brought back), offload again, 2 more: the
// logits and the caches are those of the same feeds without offloads.
TEST(Offload, TheRoundTripGivesTheBitsOfNeverOffloading) {
  for (const ModelCase& m : model_cases()) {
    const Weights w = init_weights(m.config, 5);
    const std::vector<int32_t> tokens = random_tokens(9, 12, m.config.vocab);
    const auto part = [&](size_t from, size_t n) {
      return std::vector<int32_t>(tokens.begin() + std::ptrdiff_t(from),
                                  tokens.begin() + std::ptrdiff_t(from + n));
    };
    for (int block : {1, 3, 16}) {
      auto plain = make_cpu_engine(m.config, w, tiered(block, 0, 0));
      auto moved = make_cpu_engine(m.config, w, tiered(block, 0, 16));
      const SequenceId a = plain->start(), b = moved->start();
      expect_bitwise(feed(*plain, a, part(0, 7), {4, 3}), feed(*moved, b, part(0, 7), {4, 3}),
                     "prompt");
      moved->offload(b);
      const PoolReport after = moved->pool();
      EXPECT_EQ(after.used, 0) << counts(after);
      EXPECT_EQ(after.host_used, (7 + block - 1) / block) << counts(after);
      EXPECT_EQ(after.host_free + after.host_used + after.host_cached, after.host_total);
      EXPECT_EQ(cache_bytes(*plain, a), cache_bytes(*moved, b)) << "cache on the host tier";
      EXPECT_EQ(counts(moved->pool()), counts(after)) << "cache() moved blocks";
      expect_bitwise(feed(*plain, a, part(7, 3), {3}), feed(*moved, b, part(7, 3), {3}), "back");
      EXPECT_EQ(moved->pool().host_used, 0);
      moved->offload(b);
      moved->offload(b);  // nothing left on the device: moves nothing
      expect_bitwise(feed(*plain, a, part(10, 2), {1, 1}), feed(*moved, b, part(10, 2), {1, 1}),
                     "decode after a second offload");
      EXPECT_EQ(cache_bytes(*plain, a), cache_bytes(*moved, b)) << "cache at the end";
      EXPECT_EQ(moved->unheld_storage_check(), "");
    }
  }
}

// A fork shares the parent's blocks: the offload moves each once and both
// tables point at the host block; the child's step brings it back for both.
TEST(Offload, ASharedBlockMovesOnceForEveryHolder) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 6);
  auto engine = make_cpu_engine(c, w, tiered(2, 0, 8));
  const SequenceId parent = engine->start();
  feed(*engine, parent, random_tokens(1, 4, c.vocab), {4});
  const SequenceId child = engine->fork(parent, 4);
  engine->offload(parent);
  PoolReport r = engine->pool();
  EXPECT_EQ(r.host_used, 2) << counts(r);
  EXPECT_EQ(r.used, 0) << counts(r);
  for (const auto& [id, table] : r.tables) {
    for (const int b : table) EXPECT_GE(b, r.total) << "sequence " << id << " kept a device block";
  }
  const std::vector<uint8_t> before = cache_bytes(*engine, child);
  feed(*engine, child, random_tokens(2, 1, c.vocab), {1});
  r = engine->pool();
  EXPECT_EQ(r.host_used, 0) << counts(r);
  EXPECT_EQ(r.host_free, r.host_total) << counts(r);
  for (int b = 0; b < r.total + r.host_total; ++b) {
    int holders = 0;
    for (const auto& [id, table] : r.tables)
      holders += int(std::count(table.begin(), table.end(), b));
    EXPECT_EQ(r.refcounts[size_t(b)], holders) << "block " << b;
  }
  EXPECT_EQ(cache_bytes(*engine, parent), before)
      << "the parent reads the block its child brought back";
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(Offload, AFullHostTierRefusesAndChangesNothing) {
  const Config c = gpt2_tiny();
  auto engine = make_cpu_engine(c, init_weights(c, 7), tiered(1, 0, 2));
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(3, 3, c.vocab), {3});
  const std::string before = counts(engine->pool());
  const std::vector<uint8_t> cache = cache_bytes(*engine, s);
  try {
    engine->offload(s);
    FAIL() << "3 blocks went to a host tier of 2";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kCapacity);
    EXPECT_NE(std::string(e.what()).find("host_blocks"), std::string::npos) << e.what();
  }
  EXPECT_EQ(counts(engine->pool()), before);
  EXPECT_EQ(cache_bytes(*engine, s), cache) << "after the refusal";
}

// s0's two blocks wait on the host while s1 fills the device pool of 3:
// s0's step (2 blocks back, 1 new) is refused with nothing changed, and
// runs once s1 has finished.
TEST(Offload, APoolTooFullToBringBlocksBackRefusesTheStep) {
  const Config c = gpt2_tiny();
  auto engine = make_cpu_engine(c, init_weights(c, 8), tiered(1, 3, 4));
  const SequenceId s0 = engine->start();
  feed(*engine, s0, random_tokens(4, 2, c.vocab), {2});
  engine->offload(s0);
  const SequenceId s1 = engine->start();
  feed(*engine, s1, random_tokens(5, 3, c.vocab), {3});
  const std::string before = counts(engine->pool());
  const std::vector<uint8_t> cache = cache_bytes(*engine, s0);
  const std::vector<int32_t> one = random_tokens(6, 1, c.vocab);
  std::vector<float> logits;
  const BatchEntry entry{s0, one};
  try {
    engine->step(std::span<const BatchEntry>(&entry, 1), logits);
    FAIL() << "two host blocks came back into a full pool";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kCapacity);
    EXPECT_NE(std::string(e.what()).find("bring back"), std::string::npos) << e.what();
  }
  EXPECT_EQ(counts(engine->pool()), before);
  EXPECT_EQ(engine->length(s0), 2);
  EXPECT_EQ(cache_bytes(*engine, s0), cache) << "after the refusal";
  engine->finish(s1);  // room again: the same step now runs
  engine->step(std::span<const BatchEntry>(&entry, 1), logits);
  EXPECT_EQ(engine->length(s0), 3);
}

// A registered block leaves the prefix cache when it moves; the step that
// brings it back registers it again.
TEST(Offload, ARegisteredBlockLeavesThePrefixCache) {
  const Config c = gpt2_tiny();
  EngineOptions o = tiered(2, 0, 8);
  o.prefix_cache = true;
  auto engine = make_cpu_engine(c, init_weights(c, 9), o);
  const std::vector<int32_t> prompt = random_tokens(10, 5, c.vocab);
  const SequenceId s = engine->start();
  feed(*engine, s, prompt, {4});
  engine->offload(s);
  const SequenceId t = engine->start();
  feed(*engine, t, prompt, {5});
  EXPECT_EQ(engine->reused(t), 0) << "a hit on a block in host memory";
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(Offload, WithoutAHostTierOrPagedStorageItIsRefused) {
  const Config c = gpt2_tiny();
  for (const EngineOptions& o : {tiered(2, 0, 0), tiered(0, 0, 0)}) {
    auto engine = make_cpu_engine(c, init_weights(c, 1), o);
    const SequenceId s = engine->start();
    try {
      engine->offload(s);
      FAIL() << "offload without a host tier";
    } catch (const EngineError& e) {
      EXPECT_EQ(e.kind(), EngineError::Kind::kBadBatch) << e.what();
    }
  }
  EngineOptions contiguous = tiered(0, 0, 4);
  EXPECT_THROW(make_cpu_engine(c, init_weights(c, 1), contiguous), InputError);
}

}  // namespace
}  // namespace kvcheck::test
