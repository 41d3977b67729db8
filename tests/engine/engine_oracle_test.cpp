// The engine against the full-recompute oracle on hand-made schedules, for
// both families with MHA, GQA and MQA, both kernel paths and every KV dtype.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

using Param = std::tuple<ModelCase, KernelPath, KvDtype>;

class EngineVsOracle : public ::testing::TestWithParam<Param> {
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
  Weights weights() const { return init_weights(config(), 11); }
  void check(const std::vector<int32_t>& tokens, const std::vector<float>& logits,
             const std::string& what) {
    expect_matches_oracle(config(), weights(), options().kv_dtype, tokens, logits, what);
  }
};

TEST_P(EngineVsOracle, SinglePrefill) {
  const auto tokens = random_tokens(1, 12, config().vocab);
  check(tokens, solo_run(config(), weights(), options(), tokens), "prefill 12");
}

TEST_P(EngineVsOracle, PrefillThenDecode) {
  const auto tokens = random_tokens(2, 14, config().vocab);
  auto engine = make_cpu_engine(config(), weights(), options());
  const SequenceId s = engine->start();
  check(tokens, feed(*engine, s, tokens, {8, 1, 1, 1, 1, 1, 1}), "prefill 8 + 6 decodes");
}

TEST_P(EngineVsOracle, RandomChunkSplits) {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const auto tokens = random_tokens(100 + seed, 20, config().vocab);
    const auto chunks = random_chunks(seed, 20);
    auto engine = make_cpu_engine(config(), weights(), options());
    const SequenceId s = engine->start();
    check(tokens, feed(*engine, s, tokens, chunks), "chunk seed " + std::to_string(seed));
  }
}

TEST_P(EngineVsOracle, RaggedBatchOfThree) {
  // Three sequences of different lengths; steps mix prefill chunks with decodes.
  const std::vector<std::vector<int32_t>> tokens = {random_tokens(31, 9, config().vocab),
                                                    random_tokens(32, 15, config().vocab),
                                                    random_tokens(33, 4, config().vocab)};
  // Per step, per sequence: how many tokens (0 = not in this step).
  const std::vector<std::vector<int>> schedule = {{5, 4, 3}, {1, 7, 1}, {1, 1, 0}, {2, 3, 0}};
  auto engine = make_cpu_engine(config(), weights(), options());
  std::vector<SequenceId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(engine->start());
  std::vector<std::vector<float>> got(3);
  std::vector<size_t> at(3, 0);
  std::vector<float> logits;
  for (const auto& step : schedule) {
    std::vector<BatchEntry> batch;
    std::vector<int> who;
    for (int i = 0; i < 3; ++i) {
      if (step[size_t(i)] == 0) continue;
      batch.push_back({ids[size_t(i)], std::span<const int32_t>(tokens[size_t(i)])
                                           .subspan(at[size_t(i)], size_t(step[size_t(i)]))});
      who.push_back(i);
    }
    engine->step(batch, logits);
    size_t row = 0;
    for (int i : who) {
      const size_t n = size_t(step[size_t(i)]) * size_t(config().vocab);
      got[size_t(i)].insert(got[size_t(i)].end(), logits.begin() + long(row),
                            logits.begin() + long(row + n));
      row += n;
      at[size_t(i)] += size_t(step[size_t(i)]);
    }
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(at[size_t(i)], tokens[size_t(i)].size());
    check(tokens[size_t(i)], got[size_t(i)], "batch sequence " + std::to_string(i));
  }
}

TEST_P(EngineVsOracle, FinishAndCompaction) {
  const auto a = random_tokens(41, 6, config().vocab);
  const auto b = random_tokens(42, 10, config().vocab);
  const auto c = random_tokens(43, 8, config().vocab);
  auto engine = make_cpu_engine(config(), weights(), options());
  const SequenceId ia = engine->start(), ib = engine->start(), ic = engine->start();
  feed(*engine, ia, a, {6});
  auto got_b = feed(*engine, ib, std::vector<int32_t>(b.begin(), b.begin() + 5), {5});
  auto got_c = feed(*engine, ic, std::vector<int32_t>(c.begin(), c.begin() + 4), {4});
  engine->finish(ia);  // rows of b and c move down
  auto rest_b = feed(*engine, ib, std::vector<int32_t>(b.begin() + 5, b.end()), {2, 1, 1, 1});
  auto rest_c = feed(*engine, ic, std::vector<int32_t>(c.begin() + 4, c.end()), {4});
  got_b.insert(got_b.end(), rest_b.begin(), rest_b.end());
  got_c.insert(got_c.end(), rest_c.begin(), rest_c.end());
  check(b, got_b, "survivor b");
  check(c, got_c, "survivor c");
}

TEST_P(EngineVsOracle, ResetAndReuse) {
  const auto a = random_tokens(51, 12, config().vocab);
  const auto b = random_tokens(52, 7, config().vocab);
  auto engine = make_cpu_engine(config(), weights(), options());
  feed(*engine, engine->start(), a, {12});
  engine->reset();
  const SequenceId s = engine->start();
  check(b, feed(*engine, s, b, {3, 4}), "after reset");
  engine->finish(s);
  const SequenceId t = engine->start();  // reuses the freed row
  check(a, feed(*engine, t, a, {1, 11}), "in a freed row");
}

std::string oracle_case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [model, path, dtype] = info.param;
  return model.name + (path == KernelPath::kReference ? "_ref_" : "_simd_") + kv_dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(AllModels, EngineVsOracle,
                         ::testing::Combine(::testing::ValuesIn(model_cases()),
                                            ::testing::Values(KernelPath::kReference,
                                                              KernelPath::kOptimized),
                                            ::testing::Values(KvDtype::kF32, KvDtype::kBF16,
                                                              KvDtype::kF16, KvDtype::kQ8_0)),
                         oracle_case_name);

}  // namespace
}  // namespace kvcheck::test
