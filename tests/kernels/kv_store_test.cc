// kv_store: f16/bf16 rounding as the one codec (model/half_float.h) gives it,
// and q8_0 rounding each block to its own scale.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/kernels.h"
#include "engine/kv_dtype.h"
#include "hwy/targets.h"
#include "tests/kernels/kernel_checks.h"

namespace kvcheck::cpu {
namespace {

TEST(KvStore, RoundsLikeTheReference) {
  Rng rng(kSeed + 13);
  auto values = random_vector(rng, 4096, -70000.0f, 70000.0f);
  for (float special : {0.0f, -0.0f, 1e-8f, 6e-8f, 65504.0f, 65520.0f, 1e38f, HUGE_VALF, NAN}) {
    values.push_back(special);
  }
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF16}) {
    std::vector<uint16_t> stored(values.size());
    kv_store_row(values.data(), dtype, values.size(), reinterpret_cast<uint8_t*>(stored.data()));
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t expected =
          dtype == KvDtype::kBF16 ? float_to_bf16(values[i]) : float_to_f16(values[i]);
      ASSERT_EQ(stored[i], expected) << kv_dtype_name(dtype) << " " << values[i];
    }
  }
  std::vector<float> f32(values.size());
  kv_store_row(values.data(), KvDtype::kF32, values.size(), reinterpret_cast<uint8_t*>(f32.data()));
  EXPECT_TRUE(same_bits(f32.data(), values.data(), values.size()));
}

// q8_0: each block's scale is fl(amax / 127), each code the nearest integer
// of x / scale, so the stored value is within s (1/2 + 2^-16) of x
// (docs/TOLERANCE.md); a partial last block gets its own scale, an all-zero
// block scale 0, a block holding a NaN a NaN scale.
TEST(KvStore, Q8RoundsEachBlockToItsOwnScale) {
  Rng rng(kSeed + 14);
  for (size_t dim : {1, 5, 32, 33, 70}) {
    for (int trial = 0; trial < 200; ++trial) {
      const float magnitude = std::ldexp(1.0f, int(rng.next() % 40) - 20);
      auto values = random_vector(rng, dim, -magnitude, magnitude);
      if (trial == 1) std::fill(values.begin(), values.end(), 0.0f);
      if (trial == 2 && dim > 32) values[33 % dim] = NAN;
      std::vector<uint8_t> row(kv_row_bytes(KvDtype::kQ8_0, dim));
      kv_store_row(values.data(), KvDtype::kQ8_0, dim, row.data());
      std::vector<float> scales(q8_blocks(dim));
      q8_scales(values.data(), dim, scales.data());
      for (size_t b = 0; b < q8_blocks(dim); ++b) {
        float amax = 0.0f, stored;
        bool nan = false;
        for (size_t i = b * kQ8Block; i < std::min(dim, (b + 1) * kQ8Block); ++i) {
          amax = std::max(amax, std::abs(values[i]));
          nan |= std::isnan(values[i]);
        }
        std::memcpy(&stored, row.data() + 4 * b, 4);
        ASSERT_TRUE(nan ? std::isnan(stored) : stored == amax / 127.0f) << "dim " << dim;
        ASSERT_TRUE(nan ? std::isnan(scales[b]) : scales[b] == stored);
        for (size_t i = b * kQ8Block; i < std::min(dim, (b + 1) * kQ8Block) && !nan; ++i) {
          const double read = kv_load(row.data(), KvDtype::kQ8_0, dim, i);
          ASSERT_LE(std::abs(read - values[i]), double(stored) * (0.5 + 0x1p-16))
              << "dim " << dim << " element " << i;
          const double code = double(int8_t(row[4 * q8_blocks(dim) + i]));
          // Nearest: the next code either way is no closer.
          ASSERT_LE(std::abs(code * stored - values[i]),
                    std::abs((code + 1) * stored - values[i]) * (1 + 1e-6));
          ASSERT_LE(std::abs(code * stored - values[i]),
                    std::abs((code - 1) * stored - values[i]) * (1 + 1e-6));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvcheck::cpu
