#include "model/weights.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/rng.h"

namespace kvcheck {
namespace {

TEST(Rng, SplitMixKnownValues) {
  // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
}

TEST(Rng, SymmetricUnitIsInRange) {
  SplitMix64 rng(42);
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.symmetric_unit();
    ASSERT_GE(u, -1.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(static_cast<double>(static_cast<float>(u)), u);
  }
}

TEST(Weights, InitIsDeterministicAndSeedSensitive) {
  const Config c = llama_tiny();
  EXPECT_EQ(init_weights(c, 7), init_weights(c, 7));
  EXPECT_NE(init_weights(c, 7).tok_embedding, init_weights(c, 8).tok_embedding);
}

TEST(Weights, KnownBitsPinThePortableGenerator) {
  // Pinned values: if these change, every golden file and case file that
  // names a weight seed changes meaning.
  const Weights w = init_weights(gpt2_tiny(), 1);
  SplitMix64 rng(1 ^ fnv1a64("tok_embedding"));
  EXPECT_EQ(w.tok_embedding[0], static_cast<float>(std::sqrt(3.0) * rng.symmetric_unit()));
}

TEST(Weights, ShapesFollowTheConfig) {
  for (Config c : {gpt2_tiny(), llama_tiny()}) {
    const Weights w = init_weights(c, 3);
    EXPECT_EQ(check_shapes(c, w), "");
    EXPECT_EQ(w.layers.size(), static_cast<size_t>(c.n_layers));
    EXPECT_EQ(w.layers[0].wk.size(), static_cast<size_t>(c.kv_width() * c.d_model));
    uint64_t total = 0;
    Weights copy = w;
    for (const TensorRef& t : tensor_table(c, copy)) total += t.data->size();
    EXPECT_EQ(total, c.parameter_count()) << family_name(c.family);
  }
}

TEST(Weights, CheckShapesNamesTheTensor) {
  const Config c = gpt2_tiny();
  Weights w = init_weights(c, 3);
  w.layers[1].wv.pop_back();
  EXPECT_EQ(check_shapes(c, w), "layers.1.wv: holds 1023 values, shape needs 1024");
}

TEST(Weights, ScaleKeepsActivationsOrderOne) {
  const Config c = llama_tiny();
  const Weights w = init_weights(c, 5);
  double sum_sq = 0;
  for (float x : w.layers[0].wq) sum_sq += double(x) * x;
  const double var = sum_sq / w.layers[0].wq.size();
  EXPECT_NEAR(var * c.d_model, 1.0, 0.1);  // variance 1/fan_in
}

}  // namespace
}  // namespace kvcheck
