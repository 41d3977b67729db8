// Bitwise invariance of the engine with itself: a token's logits are the same
// bits however its prompt was chunked, whatever shares its step, whichever
// row it sits in, and after resets, finishes and compaction.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

using Param = std::tuple<ModelCase, KernelPath, KvDtype>;

class EngineInvariance : public ::testing::TestWithParam<Param> {
 protected:
  const Config& config() const { return std::get<0>(GetParam()).config; }
  EngineOptions options() const {
    EngineOptions o;
    o.capacity = 48;
    o.max_rows = 4;
    o.kernels = std::get<1>(GetParam());
    o.kv_dtype = std::get<2>(GetParam());
    return o;
  }
  Weights weights() const { return init_weights(config(), 23); }
  std::vector<float> solo(const std::vector<int32_t>& tokens) const {
    return solo_run(config(), weights(), options(), tokens);
  }
};

TEST_P(EngineInvariance, ChunkingDoesNotChangeBits) {
  const auto tokens = random_tokens(7, 24, config().vocab);
  const auto whole = solo(tokens);
  for (uint64_t seed = 0; seed < 6; ++seed) {
    auto engine = make_cpu_engine(config(), weights(), options());
    const SequenceId s = engine->start();
    expect_bitwise(whole, feed(*engine, s, tokens, random_chunks(seed, 24)),
                   "chunk seed " + std::to_string(seed));
  }
  auto engine = make_cpu_engine(config(), weights(), options());
  const SequenceId s = engine->start();
  expect_bitwise(whole, feed(*engine, s, tokens, std::vector<int>(24, 1)), "token by token");
}

TEST_P(EngineInvariance, BatchAndRowDoNotChangeBits) {
  const auto target = random_tokens(8, 16, config().vocab);
  const auto whole = solo(target);
  for (int row = 0; row < 3; ++row) {
    auto engine = make_cpu_engine(config(), weights(), options());
    std::vector<SequenceId> others;
    for (int i = 0; i < row; ++i) others.push_back(engine->start());
    const SequenceId s = engine->start();
    others.push_back(engine->start());
    std::vector<std::vector<int32_t>> other_tokens;
    for (size_t i = 0; i < others.size(); ++i) {
      other_tokens.push_back(random_tokens(900 + i, 16, config().vocab));
    }
    // One step: the target's 10-token prefill beside other sequences' chunks
    // of other lengths; then decodes side by side.
    std::vector<float> got, logits;
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < others.size(); ++i) {
      batch.push_back({others[i], std::span<const int32_t>(other_tokens[i]).first(3 + i)});
    }
    const size_t before = batch.size() / 2;  // entries ahead of the target
    batch.insert(batch.begin() + long(before), {s, std::span<const int32_t>(target).first(10)});
    engine->step(batch, logits);
    size_t offset = 0;
    for (size_t i = 0; i < before; ++i) offset += batch[i].tokens.size();
    const size_t V = size_t(config().vocab);
    got.insert(got.end(), logits.begin() + long(offset * V),
               logits.begin() + long((offset + 10) * V));
    for (size_t t = 10; t < target.size(); ++t) {
      batch.clear();
      batch.push_back({s, std::span<const int32_t>(target).subspan(t, 1)});
      for (size_t i = 0; i < others.size(); ++i) {
        batch.push_back(
            {others[i], std::span<const int32_t>(other_tokens[i]).subspan(3 + i + t - 10, 1)});
      }
      engine->step(batch, logits);
      got.insert(got.end(), logits.begin(), logits.begin() + long(V));
    }
    expect_bitwise(whole, got, "row " + std::to_string(row));
  }
}

TEST_P(EngineInvariance, ResetAndReusedRowsStartClean) {
  const auto a = random_tokens(9, 12, config().vocab);
  const auto b = random_tokens(10, 9, config().vocab);
  const auto fresh_b = solo(b);
  auto engine = make_cpu_engine(config(), weights(), options());
  feed(*engine, engine->start(), a, {5, 7});
  engine->reset();
  const SequenceId s = engine->start();
  expect_bitwise(fresh_b, feed(*engine, s, b, {9}), "after reset");
  engine->finish(s);
  const SequenceId t = engine->start();
  expect_bitwise(fresh_b, feed(*engine, t, b, {2, 7}), "freed and reused row");
}

TEST_P(EngineInvariance, CompactionKeepsSurvivorsBits) {
  const auto a = random_tokens(11, 8, config().vocab);
  const auto b = random_tokens(12, 8, config().vocab);
  const auto c = random_tokens(13, 8, config().vocab);
  auto engine = make_cpu_engine(config(), weights(), options());
  const SequenceId ia = engine->start(), ib = engine->start(), ic = engine->start();
  feed(*engine, ia, a, {8});
  auto got_b = feed(*engine, ib, std::vector<int32_t>(b.begin(), b.begin() + 4), {4});
  auto got_c = feed(*engine, ic, std::vector<int32_t>(c.begin(), c.begin() + 4), {4});
  engine->finish(ib);  // c moves from row 2 to row 1
  auto rest_c = feed(*engine, ic, std::vector<int32_t>(c.begin() + 4, c.end()), {1, 3});
  got_c.insert(got_c.end(), rest_c.begin(), rest_c.end());
  expect_bitwise(solo(c), got_c, "survivor c");
  engine->finish(ia);  // c moves to row 0
  EXPECT_EQ(engine->length(ic), 8);
}

TEST_P(EngineInvariance, SameScenarioTwiceSameBits) {
  const auto tokens = random_tokens(14, 20, config().vocab);
  expect_bitwise(solo(tokens), solo(tokens), "determinism");
}

std::string invariance_case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [model, path, dtype] = info.param;
  return model.name + (path == KernelPath::kReference ? "_ref_" : "_simd_") + kv_dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(
    AllModels, EngineInvariance,
    ::testing::Combine(::testing::ValuesIn(model_cases()),
                       ::testing::Values(KernelPath::kReference, KernelPath::kOptimized),
                       ::testing::Values(KvDtype::kF32, KvDtype::kBF16, KvDtype::kQ8_0)),
    invariance_case_name);

}  // namespace
}  // namespace kvcheck::test

namespace kvcheck::test {
namespace {

TEST(EngineThreads, ThreadCountDoesNotChangeBits) {
  for (const ModelCase& m : model_cases()) {
    Config c = m.config;
    c.d_ff = 200;  // output widths that do not split evenly
    c.vocab = 97;
    const Weights w = init_weights(c, 3);
    const auto a = random_tokens(1, 20, c.vocab), b = random_tokens(2, 13, c.vocab);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      EngineOptions o;
      o.capacity = 32;
      o.threads = threads;
      auto engine = make_cpu_engine(c, w, o);
      const SequenceId sa = engine->start(), sb = engine->start();
      std::vector<float> logits;
      const BatchEntry batch[] = {{sa, std::span<const int32_t>(a).first(17)},
                                  {sb, std::span<const int32_t>(b)}};
      engine->step(batch, logits);
      auto rest = feed(*engine, sa, std::vector<int32_t>(a.begin() + 17, a.end()), {1, 1, 1});
      logits.insert(logits.end(), rest.begin(), rest.end());
      results.push_back(logits);
    }
    expect_bitwise(results[0], results[1], m.name + " threads 1 vs 2");
    expect_bitwise(results[0], results[2], m.name + " threads 1 vs 3");
  }
}

}  // namespace
}  // namespace kvcheck::test
