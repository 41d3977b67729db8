// The derived tolerance: the correct engine stays inside it, and it is tight
// enough to mean something (a bound as wide as the logits would pass anything).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backends/in_tree.h"
#include "engine/arithmetic_presets.h"
#include "oracle/oracle.h"
#include "properties/runner.h"
#include "properties/tolerance.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {
namespace {

TEST(Tolerance, Constants) {
  EXPECT_DOUBLE_EQ(gamma_n(1), 0x1p-24 / (1 - 0x1p-24));
  EXPECT_EQ(kv_storage_error(KvDtype::kF32).relative, 0.0);
  EXPECT_EQ(kv_storage_error(KvDtype::kF32).absolute, 0.0);
  EXPECT_EQ(kv_storage_error(KvDtype::kBF16).relative, 0x1p-8);
  EXPECT_EQ(kv_storage_error(KvDtype::kF16).relative, 0x1p-11);
  EXPECT_EQ(kv_storage_error(KvDtype::kF16).absolute, 0x1p-25);
  EXPECT_NEAR(2 * std::exp(-kConfidence * kConfidence / 2), 4e-16, 1e-16);
}

struct Fixture {
  Config config;
  Weights weights;
  std::vector<int32_t> tokens;
};

Fixture fixture(Family family) {
  Fixture f{small_config(family, 2, 4, 2), {}, {}};
  f.weights = init_weights(f.config, 3);
  f.tokens = token_table(4, {20}, f.config.vocab)[0];
  return f;
}

// The reference cache serves a prefix of a sequence it holds by slicing
// (properties/common/reference.cpp, ReferenceCache): the oracle and the bounds of
// the first n tokens must be those rows of the whole sequence's, bit for bit.
TEST(Tolerance, APrefixOfAReferenceIsTheReferenceOfThePrefix) {
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    for (const auto& [heads, kv_heads] : {std::pair{4, 2}, std::pair{2, 2}, std::pair{4, 1}}) {
      const Config config = small_config(family, 2, heads, kv_heads);
      const Weights weights = init_weights(config, 11);
      const std::vector<int32_t> tokens = token_table(5, {20}, config.vocab)[0];
      // The oracle's own prefix does not depend on the dtype or the
      // arithmetic: checked once per model, not once per bound.
      const oracle::Output whole = oracle::forward(config, weights, tokens);
      for (int n : {1, 7, 19, 20}) {
        SCOPED_TRACE(std::string(family_name(family)) + " heads " + std::to_string(heads) + "/" +
                     std::to_string(kv_heads) + " n " + std::to_string(n));
        const std::span<const int32_t> first(tokens.data(), size_t(n));
        const oracle::Output direct = oracle::forward(config, weights, first);
        const oracle::Output sliced = oracle::prefix(whole, n, config.n_layers);
        EXPECT_EQ(sliced.n_tokens, direct.n_tokens);
        EXPECT_EQ(sliced.logits, direct.logits);
        EXPECT_EQ(sliced.k, direct.k);
        EXPECT_EQ(sliced.v, direct.v);
      }
      for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
        for (const ArithmeticPreset& arithmetic : arithmetic_presets()) {
          const ErrorBounds all =
              derive_error_bounds(config, weights, tokens, dtype, arithmetic.arithmetic);
          for (int n : {1, 7, 19, 20}) {
            SCOPED_TRACE(std::string(family_name(family)) + " heads " + std::to_string(heads) +
                         "/" + std::to_string(kv_heads) + " " + kv_dtype_name(dtype) +
                         " arithmetic " + arithmetic.name + " n " + std::to_string(n));
            const std::span<const int32_t> first(tokens.data(), size_t(n));
            const ErrorBounds bounds =
                derive_error_bounds(config, weights, first, dtype, arithmetic.arithmetic);
            const ErrorBounds cut = prefix(all, n, config.n_layers);
            EXPECT_EQ(cut.n_tokens, bounds.n_tokens);
            EXPECT_EQ(cut.logits, bounds.logits);
            EXPECT_EQ(cut.k, bounds.k);
            EXPECT_EQ(cut.v, bounds.v);
            EXPECT_EQ(cut.k_computed, bounds.k_computed);
            EXPECT_EQ(cut.v_computed, bounds.v_computed);
          }
        }
      }
    }
  }
}

TEST(Tolerance, ShapesAndStorageTerms) {
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    const Fixture f = fixture(family);
    const oracle::Output ref = oracle::forward(f.config, f.weights, f.tokens);
    const ErrorBounds f32 = derive_error_bounds(f.config, f.weights, f.tokens, KvDtype::kF32);
    const ErrorBounds bf16 = derive_error_bounds(f.config, f.weights, f.tokens, KvDtype::kBF16);
    ASSERT_EQ(f32.logits.size(), ref.logits.size());
    ASSERT_EQ(f32.k.size(), ref.k.size());
    ASSERT_EQ(f32.v.size(), ref.v.size());
    for (size_t i = 0; i < f32.logits.size(); ++i) {
      ASSERT_TRUE(std::isfinite(f32.logits[i]) && f32.logits[i] > 0);
      ASSERT_GT(bf16.logits[i], f32.logits[i]);  // storage error flows into the logits
    }
    for (size_t i = 0; i < f32.k.size(); ++i) {
      // bf16 storage alone may move an element by up to 2^-8 of it.
      ASSERT_GE(bf16.k[i], 0x1p-8 * std::abs(ref.k[i]));
      ASSERT_GE(bf16.v[i], 0x1p-8 * std::abs(ref.v[i]));
      ASSERT_GT(f32.k[i], 0);
    }
  }
}

TEST(Tolerance, TightEnoughToMeanSomething) {
  // The f32 bound stays below 1e-4 of the logits' spread, bf16 below 2e-2:
  // any fault that moves a logit by more fails P1.
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    const Fixture f = fixture(family);
    const oracle::Output ref = oracle::forward(f.config, f.weights, f.tokens);
    double spread = 0;
    for (double l : ref.logits) spread = std::max(spread, std::abs(l));
    for (auto [dtype, limit] : {std::pair{KvDtype::kF32, 1e-4}, std::pair{KvDtype::kBF16, 2e-2}}) {
      const ErrorBounds b = derive_error_bounds(f.config, f.weights, f.tokens, dtype);
      double widest = 0;
      for (double x : b.logits) widest = std::max(widest, x);
      EXPECT_LT(widest / spread, limit) << family_name(family) << " " << kv_dtype_name(dtype);
    }
  }
}

TEST(Tolerance, CorrectEngineWithinBoundOnBothPathsAndAllDtypes) {
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    const Fixture f = fixture(family);
    const oracle::Output ref = oracle::forward(f.config, f.weights, f.tokens);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
      const ErrorBounds b = derive_error_bounds(f.config, f.weights, f.tokens, dtype);
      for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
        Scenario s;
        s.config = f.config;
        s.weight_seed = 3;
        s.capacity = 32;
        s.sequences = {f.tokens};
        s.kv_dtype = dtype;
        const Scenario solo = solo_scenario(s, f.tokens, {7, 1, 1, 11});
        const RunResult run = run_scenario(solo, f.weights, cpu_engine_factory({}, path));
        ASSERT_FALSE(run.engine_failed);
        double worst = 0;
        for (size_t i = 0; i < ref.logits.size(); ++i) {
          worst = std::max(worst, std::abs(double(run.logits[0][i]) - ref.logits[i]) / b.logits[i]);
        }
        EXPECT_LT(worst, 1.0) << family_name(family) << " " << kv_dtype_name(dtype);
        EXPECT_GT(worst, 0.0);  // the engine is float: exact agreement would be suspicious
      }
    }
  }
}

// llama.cpp computes RoPE angles in float (ggml-cpu rope_f32): scale =
// powf(base, -2.0f / D), angle_i = pos * scale^i by repeated float products.
// The K it caches differs from the exact rotation by that angle error. For
// each row of exact K ([rows][KVH][D]) rotated by angle_position(row), this
// checks that the float-angle bound covers that difference and returns how
// many elements the double-angle bound leaves uncovered.
int float_angle_cover(const Config& c, const std::vector<double>& k,
                      const std::vector<double>& exact_bound,
                      const std::vector<double>& float_bound, int rows,
                      const std::function<int(int)>& angle_position) {
  const int D = c.head_dim, half = D / 2, KV = c.kv_width();
  const float scale = powf(float(c.rope_theta), -2.0f / float(D));
  int uncovered_by_exact = 0;
  for (int row = 0; row < rows; ++row) {
    const int p = angle_position(row);
    float angle = float(p);  // llama.cpp's theta, multiplied by scale per pair
    for (int i = 0; i < half; ++i, angle *= scale) {
      const double error = double(angle) - p * std::pow(c.rope_theta, -2.0 * i / D);
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const size_t at = size_t(row) * size_t(KV) + size_t(g * D);
        // Rotating the exact K further by the error is K with llama.cpp's angle.
        const double k1 = k[at + size_t(i)], k2 = k[at + size_t(i + half)];
        const double moved[2] = {k1 * std::cos(error) - k2 * std::sin(error) - k1,
                                 k2 * std::cos(error) + k1 * std::sin(error) - k2};
        for (int j = 0; j < 2; ++j) {
          const size_t e = at + size_t(i + j * half);
          EXPECT_LE(std::abs(moved[j]), float_bound[e]) << "row " << row << " i " << i;
          uncovered_by_exact += std::abs(moved[j]) > exact_bound[e];
        }
      }
    }
  }
  return uncovered_by_exact;
}

// With rope_angles_in_float the K bound covers that difference at every
// position; the double-angle bound does not at the far ones (so the term is
// needed).
TEST(Tolerance, FloatRopeAnglesCoverLlamaCppsAngles) {
  Config c = small_config(Family::kLlama, 1, 2, 2);
  c.head_dim = 16;
  c.max_pos = 600;
  const Weights weights = init_weights(c, 5);
  const std::vector<int32_t> tokens = token_table(9, {600}, c.vocab)[0];
  const oracle::Output ref = oracle::forward(c, weights, tokens);
  const ErrorBounds exact = derive_error_bounds(c, weights, tokens, KvDtype::kF32);
  const ErrorBounds in_float =
      derive_error_bounds(c, weights, tokens, KvDtype::kF32, *find_arithmetic_preset("ggml-f32"));
  EXPECT_GT(
      float_angle_cover(c, ref.k, exact.k, in_float.k, int(tokens.size()), [](int t) { return t; }),
      0);
  for (size_t i = 0; i < exact.logits.size(); ++i) ASSERT_GE(in_float.logits[i], exact.logits[i]);
}

// A shift re-rotates a stored key by delta * scale^i in float: at a large
// delta that angle's error is what the history bound must cover.
TEST(Tolerance, FloatRopeAnglesCoverAShiftsAnglesInAHistory) {
  Config c = small_config(Family::kLlama, 1, 2, 2);
  c.head_dim = 8;
  c.max_pos = 32100;
  const Weights weights = init_weights(c, 5);
  const int delta = 31999;  // 32000 * 0.1f rounds back to 3200 exactly; 31999's does not
  std::vector<oracle::Event> events;
  const std::vector<std::vector<int32_t>> tokens = token_table(9, {3}, c.vocab);
  for (const int32_t token : tokens[0]) events.push_back(oracle::Event::feed(token));
  events.push_back(oracle::Event::shift(0, 3, delta));
  const oracle::CellOutput ref = oracle::replay(c, weights, events);
  const HistoryBounds exact = derive_history_bounds(c, weights, events, KvDtype::kF32);
  const HistoryBounds in_float =
      derive_history_bounds(c, weights, events, KvDtype::kF32, *find_arithmetic_preset("ggml-f32"));
  EXPECT_GT(float_angle_cover(c, ref.k, exact.k, in_float.k, int(ref.positions.size()),
                              [&](int) { return delta; }),
            0);
}

TEST(Tolerance, OneLogitOffByTenBoundsFailsP1) {
  // The flip side of the margin: the check really compares against the bound.
  const Fixture f = fixture(Family::kLlama);
  const ErrorBounds b = derive_error_bounds(f.config, f.weights, f.tokens, KvDtype::kF32);
  const double shift = 10 * b.logits[5];
  struct ShiftedEngine final : Engine {
    std::unique_ptr<Engine> inner;
    double shift;
    const Config& config() const override { return inner->config(); }
    const EngineOptions& options() const override { return inner->options(); }
    std::string name() const override { return "shifted"; }
    SequenceId start() override { return inner->start(); }
    void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
      inner->step(batch, logits);
      logits[5] += static_cast<float>(shift);
    }
    void finish(SequenceId s) override { inner->finish(s); }
    void reset() override { inner->reset(); }
    int length(SequenceId s) const override { return inner->length(s); }
    CacheSnapshot cache(SequenceId s, int l) const override { return inner->cache(s, l); }
    MemoryReport memory() const override { return inner->memory(); }
  };
  const EngineFactory factory = [shift, base = cpu_engine_factory()](
                                    const Config& c, const Weights& w, const EngineOptions& o) {
    auto engine = std::make_unique<ShiftedEngine>();
    engine->inner = base(c, w, o);
    engine->shift = shift;
    return std::unique_ptr<Engine>(std::move(engine));
  };
  Scenario s;
  s.config = f.config;
  s.weight_seed = 3;
  s.capacity = 32;
  s.sequences = {f.tokens};
  s.calls = {S(0), P({{0, 20}})};
  const Verdict v = check_property(Property::kOracle, s, factory);
  ASSERT_FALSE(v.passed) << describe(v);
  EXPECT_EQ(v.where.position, 0);
  EXPECT_GT(v.worst_ratio, 8.0);
  EXPECT_LT(v.worst_ratio, 12.0);
}

}  // namespace
}  // namespace kvcheck::test
