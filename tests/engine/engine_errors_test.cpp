// Misuse the engine refuses: each error names the sequence and the limit, and
// leaves the engine usable with every sequence's state untouched.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

Config small_config() {
  Config c = llama_tiny();
  c.max_pos = 64;
  return c;
}

EngineOptions small_options() {
  EngineOptions o;
  o.capacity = 16;
  o.max_rows = 2;
  return o;
}

template <class F>
void expect_engine_error(F&& f, EngineError::Kind kind, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no EngineError; expected: " << message;
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), kind);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(EngineErrors, CapacityOverflowNamesSequenceAndLimitAndChangesNothing) {
  const Config c = small_config();
  const Weights w = init_weights(c, 5);
  const auto a = random_tokens(1, 17, c.vocab);
  const auto b = random_tokens(2, 9, c.vocab);
  auto engine = make_cpu_engine(c, w, small_options());
  const SequenceId ia = engine->start(), ib = engine->start();
  auto got_a = feed(*engine, ia, std::vector<int32_t>(a.begin(), a.begin() + 10), {10});
  auto got_b = feed(*engine, ib, std::vector<int32_t>(b.begin(), b.begin() + 5), {5});
  // b's decode shares the refused step with a's overflowing chunk.
  const BatchEntry batch[] = {{ib, std::span<const int32_t>(b).subspan(5, 1)},
                              {ia, std::span<const int32_t>(a).subspan(10, 7)}};
  std::vector<float> logits;
  expect_engine_error([&] { engine->step(batch, logits); }, EngineError::Kind::kCapacity,
                      "step: sequence 0: appending 7 tokens at position 10 exceeds the capacity "
                      "of 16 positions");
  EXPECT_EQ(engine->length(ia), 10);
  EXPECT_EQ(engine->length(ib), 5);
  // Both go on as if the refused step never happened.
  auto rest_b = feed(*engine, ib, std::vector<int32_t>(b.begin() + 5, b.end()), {1, 3});
  auto rest_a = feed(*engine, ia, std::vector<int32_t>(a.begin() + 10, a.begin() + 16), {6});
  got_a.insert(got_a.end(), rest_a.begin(), rest_a.end());
  got_b.insert(got_b.end(), rest_b.begin(), rest_b.end());
  expect_bitwise(solo_run(c, w, small_options(), std::vector<int32_t>(a.begin(), a.begin() + 16)),
                 got_a, "a after the refused step");
  expect_bitwise(solo_run(c, w, small_options(), b), got_b, "b after the refused step");
  // Exactly at capacity is fine; one more is not.
  EXPECT_EQ(engine->length(ia), 16);
  expect_engine_error([&] { feed(*engine, ia, {1}, {1}); }, EngineError::Kind::kCapacity,
                      "step: sequence 0: appending 1 tokens at position 16 exceeds the capacity "
                      "of 16 positions");
}

TEST(EngineErrors, RowOverflow) {
  const Config c = small_config();
  auto engine = make_cpu_engine(c, init_weights(c, 5), small_options());
  engine->start();
  const SequenceId b = engine->start();
  expect_engine_error([&] { engine->start(); }, EngineError::Kind::kRows,
                      "start: all 2 rows are taken by running sequences (max_rows)");
  engine->finish(b);
  EXPECT_NO_THROW(engine->start());
}

TEST(EngineErrors, BadBatches) {
  const Config c = small_config();
  auto engine = make_cpu_engine(c, init_weights(c, 5), small_options());
  const SequenceId s = engine->start();
  std::vector<float> logits;
  const std::vector<int32_t> ok = {1, 2}, bad = {3, 64};
  const BatchEntry twice[] = {{s, ok}, {s, ok}};
  expect_engine_error([&] { engine->step(twice, logits); }, EngineError::Kind::kBadBatch,
                      "step: sequence 0 appears twice in one batch");
  const BatchEntry empty[] = {{s, {}}};
  expect_engine_error([&] { engine->step(empty, logits); }, EngineError::Kind::kBadBatch,
                      "step: sequence 0: empty chunk");
  const BatchEntry bad_token[] = {{s, bad}};
  expect_engine_error([&] { engine->step(bad_token, logits); }, EngineError::Kind::kBadToken,
                      "step: sequence 0, token 1: id 64 is outside the vocabulary [0, 64)");
  const BatchEntry unknown[] = {{42, ok}};
  expect_engine_error([&] { engine->step(unknown, logits); }, EngineError::Kind::kUnknownSequence,
                      "step: sequence 42 is not running (never started, finished, or reset)");
  engine->finish(s);
  expect_engine_error([&] { engine->finish(s); }, EngineError::Kind::kUnknownSequence,
                      "finish: sequence 0 is not running (never started, finished, or reset)");
  EXPECT_EQ(engine->memory().kv_bytes,
            kv_cache_bytes(c.n_layers, 2, 16, c.n_kv_heads, c.head_dim, 4));
}

TEST(EngineErrors, BadOptionsAndWeights) {
  const Config c = small_config();
  const Weights w = init_weights(c, 5);
  EngineOptions o = small_options();
  o.capacity = 65;
  EXPECT_THROW(
      {
        try {
          make_cpu_engine(c, w, o);
        } catch (const InputError& e) {
          EXPECT_STREQ(e.what(), "capacity: 65 is out of range [1, max_pos 64]");
          throw;
        }
      },
      InputError);
  Weights broken = w;
  broken.lm_head.resize(3);
  EXPECT_THROW(make_cpu_engine(c, broken, small_options()), InputError);
}

TEST(EngineMemory, KvBytesEqualTheFormulaExactly) {
  for (const ModelCase& m : model_cases()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      EngineOptions o;
      o.capacity = 40;
      o.max_rows = 3;
      o.kv_dtype = dtype;
      auto engine = make_cpu_engine(m.config, init_weights(m.config, 1), o);
      // head_dim elements per head and slot, plus q8_0's scales.
      const uint64_t want = 2ull * m.config.n_layers * 3 * 40 * m.config.n_kv_heads *
                            kv_row_bytes(dtype, size_t(m.config.head_dim));
      EXPECT_EQ(engine->memory().kv_bytes, want) << m.name << " " << kv_dtype_name(dtype);
      // The model's sizing formula counts whole elements; q8_0 adds scales.
      if (dtype == KvDtype::kQ8_0) continue;
      EXPECT_EQ(want, kv_cache_bytes(m.config.n_layers, 3, 40, m.config.n_kv_heads,
                                     m.config.head_dim, kv_dtype_bytes(dtype)));
    }
  }
}

TEST(EngineCache, SnapshotHoldsWhatWasFedAndPoisonIsNotVisible) {
  const Config c = small_config();
  auto engine = make_cpu_engine(c, init_weights(c, 5), small_options());
  const SequenceId s = engine->start();
  feed(*engine, s, random_tokens(3, 5, c.vocab), {2, 3});
  const CacheSnapshot snap = engine->cache(s, 1);
  EXPECT_EQ(snap.length, 5);
  EXPECT_EQ(snap.k.size(), size_t(5 * c.n_kv_heads * c.head_dim * 4));
  for (int p = 0; p < 5; ++p) {
    for (int d = 0; d < c.head_dim; ++d) EXPECT_FALSE(std::isnan(snap.k_at(p, 1, d)));
  }
}

}  // namespace
}  // namespace kvcheck::test
