// The oracle's ops against values a reader can check by hand.
#include "oracle/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace kvcheck::oracle {
namespace {

TEST(Ops, LayerNormUsesBiasedVarianceGainAndBias) {
  const std::vector<double> x = {1.0, 2.0, 3.0};  // mean 2, biased variance 2/3
  const std::vector<float> gain = {2.0f, 2.0f, 2.0f};
  const std::vector<float> bias = {0.5f, 0.5f, 0.5f};
  const double eps = 1e-5;
  const double inv_std = 1.0 / std::sqrt(2.0 / 3.0 + eps);
  const std::vector<double> out = layer_norm(x, gain, bias, eps);  // [3]
  ASSERT_EQ(out.size(), 3u);
  EXPECT_NEAR(out[0], -2.0 * inv_std + 0.5, 1e-14);
  EXPECT_NEAR(out[1], 0.5, 1e-14);
  EXPECT_NEAR(out[2], 2.0 * inv_std + 0.5, 1e-14);
}

TEST(Ops, RmsNormDividesByRootMeanSquare) {
  const std::vector<double> x = {3.0, 4.0};  // mean square 12.5
  const std::vector<float> gain = {1.0f, 0.5f};
  const std::vector<double> out = rms_norm(x, gain, 0.5);  // sqrt(12.5 + 0.5) = sqrt(13)
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], 3.0 / std::sqrt(13.0), 1e-15);
  EXPECT_NEAR(out[1], 0.5 * 4.0 / std::sqrt(13.0), 1e-15);
}

TEST(Ops, LinearReadsWeightsAsOutByIn) {
  // W [3][2]; reading it as [in][out] would give {-3, -3, -3} instead.
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  const std::vector<float> bias = {0.5f, 0.0f, -1.0f};
  const std::vector<double> x = {1.0, -1.0};
  EXPECT_EQ(linear(x, weight, bias, 3), (std::vector<double>{-0.5, -1.0, -2.0}));
  EXPECT_EQ(linear(x, weight, {}, 3), (std::vector<double>{-1.0, -1.0, -1.0}));
}

TEST(Ops, GeluIsTheTanhFormNotErf) {
  // 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)); the erf form gives 0.8413447460685429.
  EXPECT_NEAR(gelu_tanh(1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(gelu_tanh(-2.0), -0.04540230591222494, 1e-15);
  EXPECT_EQ(gelu_tanh(0.0), 0.0);
}

TEST(Ops, SiluIsXTimesSigmoid) {
  EXPECT_NEAR(silu(1.0), 0.7310585786300049, 1e-15);
  EXPECT_EQ(silu(0.0), 0.0);
}

TEST(Ops, SoftmaxOverOneScoreIsOne) {
  EXPECT_EQ(softmax(std::vector<double>{-123.25}), (std::vector<double>{1.0}));
  const std::vector<double> two = softmax(std::vector<double>{0.0, std::log(3.0)});
  EXPECT_NEAR(two[0], 0.25, 1e-15);
  EXPECT_NEAR(two[1], 0.75, 1e-15);
}

TEST(Ops, SoftmaxSurvivesLargeScores) {
  const std::vector<double> weights = softmax(std::vector<double>{1000.0, 1000.0});
  EXPECT_EQ(weights, (std::vector<double>{0.5, 0.5}));
}

TEST(Ops, OneTokenAttentionReturnsValueExactly) {
  const int H = 2, KVH = 2, D = 3;
  const std::vector<double> q = {0.3, -1.2, 4.0, 2.5, 0.0, -0.7};      // [1][H][D]
  const std::vector<double> k = {1.5, 2.0, -3.0, 0.1, 0.2, 0.3};       // [1][KVH][D]
  const std::vector<double> v = {7.0, -8.5, 0.125, 1e-3, 42.0, -6.0};  // [1][KVH][D]
  EXPECT_EQ(causal_attention(q, k, v, 1, H, KVH, D), v);
}

TEST(Ops, AttentionScalesScoresByRootHeadDim) {
  // D = 2: scores are q.k / sqrt(2), so key 1 scores ln 3 and takes weight 3/4.
  const int H = 1, KVH = 1, D = 2;
  const double s = std::log(3.0) * std::sqrt(2.0);
  const std::vector<double> q = {0.0, 0.0, 1.0, 0.0};                       // [2][H][D]
  const std::vector<double> k = {0.0, 0.0, s, 0.0};                         // [2][KVH][D]
  const std::vector<double> v = {4.0, 0.0, 0.0, 8.0};                       // [2][KVH][D]
  const std::vector<double> out = causal_attention(q, k, v, 2, H, KVH, D);  // [2][H][D]
  EXPECT_EQ(out[0], 4.0);  // position 0 sees only key 0
  EXPECT_EQ(out[1], 0.0);
  EXPECT_NEAR(out[2], 1.0, 1e-14);
  EXPECT_NEAR(out[3], 6.0, 1e-14);
}

TEST(Ops, AttentionIgnoresLaterPositions) {
  const int T = 3, H = 2, KVH = 1, D = 2;
  std::vector<double> q = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6,
                           0.7, 0.8, 0.9, 1.0, 1.1, 1.2};                      // [T][H][D]
  std::vector<double> k = {1.0, -1.0, 0.5, 2.0, -0.3, 0.7};                    // [T][KVH][D]
  std::vector<double> v = {3.0, 1.0, -2.0, 5.0, 0.25, 9.0};                    // [T][KVH][D]
  const std::vector<double> before = causal_attention(q, k, v, T, H, KVH, D);  // [T][H][D]
  k[4] = 100.0, v[5] = -100.0;  // the last position's key and value
  const std::vector<double> after = causal_attention(q, k, v, T, H, KVH, D);  // [T][H][D]
  const size_t first_two_positions = 2 * H * D;
  for (size_t i = 0; i < first_two_positions; ++i) EXPECT_EQ(before[i], after[i]) << i;
  EXPECT_NE(before[first_two_positions], after[first_two_positions]);
}

TEST(Ops, EightQueryHeadsReadTwoKvHeadsInterleaved) {
  std::vector<int> mapping;
  for (int h = 0; h < 8; ++h) mapping.push_back(kv_head_of(h, 8, 2));
  EXPECT_EQ(mapping, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(Ops, AttentionRoutesEachQueryHeadToItsKvHead) {
  // Every position of KV head j holds the constant value 10 (j + 1), so a
  // query head's output names the KV head it read, whatever its weights.
  const int T = 3, H = 8, KVH = 2, D = 2;
  std::vector<double> q(T * H * D), k(T * KVH * D), v(T * KVH * D);  // [T][H|KVH][D]
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(1.7 * static_cast<double>(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.9 * static_cast<double>(i));
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < KVH; ++j) {
      for (int d = 0; d < D; ++d) v[(t * KVH + j) * D + d] = 10.0 * (j + 1);
    }
  }
  const std::vector<double> out = causal_attention(q, k, v, T, H, KVH, D);  // [T][H][D]
  for (int t = 0; t < T; ++t) {
    std::vector<double> per_head;
    for (int h = 0; h < H; ++h) per_head.push_back(std::round(out[(t * H + h) * D]));
    EXPECT_EQ(per_head, (std::vector<double>{10, 10, 10, 10, 20, 20, 20, 20})) << "position " << t;
  }
}

TEST(Ops, RopeAtPositionZeroIsIdentity) {
  const std::vector<double> original = {0.3, -1.0, 2.5, 7.0, -0.125, 4.0};  // [D]
  std::vector<double> head = original;
  apply_rope(head, 0, 10000.0);
  EXPECT_EQ(head, original);
}

TEST(Ops, RopePreservesNorm) {
  const std::vector<double> original = {0.3, -1.0, 2.5, 7.0, -0.125, 4.0, 1.5, -2.0};  // [D]
  for (int position : {1, 7, 255, 4096}) {
    std::vector<double> head = original;
    apply_rope(head, position, 10000.0);
    double before = 0.0, after = 0.0;
    for (size_t i = 0; i < head.size(); ++i) {
      before += original[i] * original[i];
      after += head[i] * head[i];
    }
    EXPECT_NEAR(after, before, 1e-12 * before) << "position " << position;
    EXPECT_NE(head, original) << "position " << position;
  }
}

TEST(Ops, RopeRotatesHalvesNotAdjacentPairs) {
  // D = 4, theta = 100: pair (0, 2) turns at 1 rad per position, pair (1, 3)
  // at 100^(-2/4) = 0.1 rad. Interleaved RoPE would pair (0, 1) instead.
  const int position = 3;
  std::vector<double> first = {1.0, 0.0, 0.0, 0.0};
  apply_rope(first, position, 100.0);
  EXPECT_NEAR(first[0], std::cos(3.0), 1e-15);
  EXPECT_EQ(first[1], 0.0);
  EXPECT_NEAR(first[2], std::sin(3.0), 1e-15);
  EXPECT_EQ(first[3], 0.0);

  std::vector<double> second = {0.0, 1.0, 0.0, 0.0};
  apply_rope(second, position, 100.0);
  EXPECT_EQ(second[0], 0.0);
  EXPECT_NEAR(second[1], std::cos(0.3), 1e-15);
  EXPECT_EQ(second[2], 0.0);
  EXPECT_NEAR(second[3], std::sin(0.3), 1e-15);
}

TEST(Ops, RopeScoresDependOnlyOnRelativePosition) {
  const std::vector<double> query = {0.5, -1.5, 2.0, 0.25, 1.0, -0.75};  // [D]
  const std::vector<double> key = {1.25, 0.5, -2.0, 3.0, 0.1, -1.0};     // [D]
  auto score = [&](int query_position, int key_position) {
    std::vector<double> q = query, k = key;
    apply_rope(q, query_position, 10000.0);
    apply_rope(k, key_position, 10000.0);
    double dot = 0.0;
    for (size_t i = 0; i < q.size(); ++i) dot += q[i] * k[i];
    return dot;
  };
  EXPECT_NEAR(score(5, 2), score(105, 102), 1e-12);
  EXPECT_NEAR(score(9, 9), score(0, 0), 1e-12);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 3)), 1e-3);
}

}  // namespace
}  // namespace kvcheck::oracle
