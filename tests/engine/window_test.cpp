// Sliding windows in the CPU engine (docs/OPERATIONS.md, "Sliding windows"):
// rings of W slots that match the oracle's window mask, keep chunking and
// batching bitwise invariant when chunks straddle the ring's edge, report
// what the ring holds, and refuse what a ring cannot honour.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cpu/cpu_engine.h"
#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

struct WindowCase {
  int window, pattern;
};

// Windows below, at and above the prompt; every layer windowed or every
// second one global (Gemma's pattern).
const WindowCase kWindows[] = {{1, 0}, {3, 0}, {5, 2}, {8, 0}, {13, 2}, {40, 0}};

TEST(Window, MatchesTheOracleUnderAnyChunking) {
  for (const ModelCase& m : model_cases()) {
    for (const WindowCase& w : kWindows) {
      Config c = m.config;
      c.sliding_window = w.window, c.sliding_window_pattern = w.pattern;
      const Weights weights = init_weights(c, 11);
      EngineOptions o;
      o.capacity = 24;
      for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
        o.kernels = path;
        const std::vector<int32_t> tokens = random_tokens(3, 21, c.vocab);
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          auto engine = make_cpu_engine(c, weights, o);
          const std::vector<float> logits =
              feed(*engine, engine->start(), tokens, random_chunks(seed, 21));
          expect_matches_oracle(c, weights, KvDtype::kF32, tokens, logits,
                                m.name + " W=" + std::to_string(w.window));
        }
      }
    }
  }
}

// Chunks that straddle the ring's edge give the bits of token by token and
// of the whole prompt at once, alone or beside another sequence.
TEST(Window, ChunkingAndBatchingKeepBitsAcrossTheRingEdge) {
  Config c = llama_tiny();
  c.sliding_window = 4;
  const Weights weights = init_weights(c, 5);
  EngineOptions o;
  o.capacity = 20;
  const std::vector<int32_t> tokens = random_tokens(9, 19, c.vocab);
  const std::vector<float> whole = solo_run(c, weights, o, tokens);
  for (const std::vector<int>& chunks :
       {std::vector<int>(19, 1), std::vector<int>{3, 3, 6, 7}, std::vector<int>{5, 14}}) {
    auto engine = make_cpu_engine(c, weights, o);
    expect_bitwise(whole, feed(*engine, engine->start(), tokens, chunks), "chunked");
  }
  // Beside a second sequence, 3 tokens each per step (a's row first).
  auto engine = make_cpu_engine(c, weights, o);
  const SequenceId a = engine->start(), b = engine->start();
  const std::vector<int32_t> other = random_tokens(4, 18, c.vocab);
  std::vector<float> batched, logits;
  const size_t V = size_t(c.vocab);
  for (size_t fed = 0; fed < 18; fed += 3) {
    const BatchEntry batch[] = {{a, std::span<const int32_t>(tokens).subspan(fed, 3)},
                                {b, std::span<const int32_t>(other).subspan(fed, 3)}};
    engine->step(batch, logits);
    batched.insert(batched.end(), logits.begin(), logits.begin() + std::ptrdiff_t(3 * V));
  }
  expect_bitwise(std::vector<float>(whole.begin(), whole.begin() + std::ptrdiff_t(18 * V)), batched,
                 "batched");
}

// The snapshot lists the ring's positions; memory counts W slots per
// windowed layer and the capacity per global one.
TEST(Window, SnapshotAndMemoryShowTheRing) {
  Config c = gpt2_tiny();
  c.n_layers = 2;
  c.sliding_window = 3;
  c.sliding_window_pattern = 2;  // layer 0 windowed, layer 1 global
  const Weights weights = init_weights(c, 2);
  EngineOptions o;
  o.capacity = 10;
  o.max_rows = 2;
  auto engine = make_cpu_engine(c, weights, o);
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(1, 7, c.vocab), {2, 5});
  const CacheSnapshot ring = engine->cache(s, 0), global = engine->cache(s, 1);
  EXPECT_EQ(ring.length, 3);
  EXPECT_EQ(ring.positions, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(global.length, 7);
  EXPECT_TRUE(global.positions.empty());
  const uint64_t per_slot = uint64_t(2) * o.max_rows * c.n_kv_heads * c.head_dim * sizeof(float);
  EXPECT_EQ(engine->memory().kv_bytes, per_slot * (3 + 10));
  EXPECT_EQ(engine->unheld_storage_check(), "");
}

TEST(Window, RefusesWhatARingCannotHonour) {
  Config c = gpt2_tiny();
  c.sliding_window = 2;
  const Weights weights = init_weights(c, 2);
  EngineOptions o;
  o.capacity = 8;
  auto engine = make_cpu_engine(c, weights, o);
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(1, 4, c.vocab), {4});
  for (const char* call : {"fork", "truncate"}) {
    try {
      if (std::string(call) == "fork") {
        engine->fork(s, 1);
      } else {
        engine->truncate(s, 1);
      }
      ADD_FAILURE() << call << " was not refused";
    } catch (const EngineError& e) {
      EXPECT_EQ(e.kind(), EngineError::Kind::kBadBatch);
      EXPECT_NE(std::string(e.what()).find("not supported with a sliding window"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(engine->length(s), 4);
  o.block_size = 2;
  try {
    make_cpu_engine(c, weights, o);
    ADD_FAILURE() << "paged storage with a window was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size: 2: paged storage is not supported"),
              std::string::npos)
        << e.what();
  }
  // Past capacity the ring still refuses: capacity bounds positions.
  o.block_size = 0;
  o.capacity = 3;
  auto small = make_cpu_engine(c, weights, o);
  const SequenceId t = small->start();
  feed(*small, t, random_tokens(2, 3, c.vocab), {3});
  const std::vector<int32_t> one = {1};
  const BatchEntry more[] = {{t, one}};
  std::vector<float> logits;
  EXPECT_THROW(small->step(more, logits), EngineError);
}

}  // namespace
}  // namespace kvcheck::test
