// matmul on every Highway target against the scalar reference and a double
// reference within gamma_{in+1} (docs/KERNELS.md), and the bitwise
// invariances the engine's batch invariance rests on: a row's bits do not
// depend on the batch, the output split or the pointers' alignment.
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

// Bound on |computed - exact| for one output of either path: any summation
// order of `in` products plus the bias add is within gamma_{in+1} of the sum
// of magnitudes (Higham, Thm 3.1 / eq. 3.5); FMA only tightens it.
struct MatmulCase {
  size_t rows, in, out;
  bool with_bias;
  size_t x_offset, w_offset;
};

void check_matmul_case(Rng& rng, const MatmulCase& c, const std::string& target) {
  const std::vector<float> x_store = random_vector(rng, c.rows * c.in + c.x_offset);
  const std::vector<float> w_store = random_vector(rng, c.out * c.in + c.w_offset);
  const std::vector<float> bias = random_vector(rng, c.out);
  const float* x = x_store.data() + c.x_offset;
  const float* w = w_store.data() + c.w_offset;
  const float* b = c.with_bias ? bias.data() : nullptr;
  std::vector<float> y_simd(c.rows * c.out, -7.0f), y_scalar(c.rows * c.out, -7.0f);
  matmul(KernelPath::kSimd, x, c.rows, w, b, c.in, c.out, 0, c.out, y_simd.data());
  matmul(KernelPath::kScalar, x, c.rows, w, b, c.in, c.out, 0, c.out, y_scalar.data());
  for (size_t i = 0; i < c.rows; ++i) {
    for (size_t o = 0; o < c.out; ++o) {
      double exact = b ? b[o] : 0.0, magnitude = b ? std::fabs(b[o]) : 0.0;
      for (size_t k = 0; k < c.in; ++k) {
        exact += double{x[i * c.in + k]} * w[o * c.in + k];
        magnitude += std::fabs(double{x[i * c.in + k]} * w[o * c.in + k]);
      }
      const double bound = kSecondOrderSlack * gamma(double(c.in + 1)) * magnitude;
      const std::string where = target + " rows=" + std::to_string(c.rows) +
                                " in=" + std::to_string(c.in) + " out=" + std::to_string(c.out) +
                                " i=" + std::to_string(i) + " o=" + std::to_string(o);
      const double simd = y_simd[i * c.out + o], scalar = y_scalar[i * c.out + o];
      expect_within("matmul simd-vs-scalar", simd, scalar, 2 * bound, where);
      expect_within("matmul simd-vs-exact", simd, exact, bound, where);
      expect_within("matmul scalar-vs-exact", scalar, exact, bound, where);
    }
  }
}

TEST(Matmul, SimdMatchesScalarWithinDerivedBoundOnEveryTarget) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed);
    // 0, 1, lanes-1/lanes/lanes+1 for 4-, 8- and 16-lane targets, large.
    for (size_t in : {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 768, 1029}) {
      for (size_t rows : {1, 2, 3, 4, 5, 9}) {
        for (size_t out : {1, 3, 4, 5, 8, 9, 13}) {
          check_matmul_case(rng, {rows, in, out, (rows + out) % 2 == 0, in % 2, out % 3}, target);
        }
      }
    }
  });
}

TEST(Matmul, ZeroSizesWriteOnlyWhatTheyOwn) {
  const std::vector<float> w(6, 1.0f), bias = {0.5f, -2.0f, 3.0f};
  for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
    std::vector<float> y(6, 42.0f);
    matmul(path, nullptr, 0, w.data(), bias.data(), 2, 3, 0, 3, y.data());
    matmul(path, w.data(), 2, w.data(), bias.data(), 2, 3, 1, 1, y.data());
    EXPECT_EQ(y, std::vector<float>(6, 42.0f));
    // in == 0: the empty sum plus bias.
    matmul(path, nullptr, 2, nullptr, bias.data(), 0, 3, 0, 3, y.data());
    EXPECT_EQ(y, (std::vector<float>{0.5f, -2.0f, 3.0f, 0.5f, -2.0f, 3.0f}));
  }
}

// Row i of a rows=N call is the same bits as a rows=1 call on that row, for
// every row count, so a token's projections do not depend on its batch.
TEST(Matmul, RowOfBatchEqualsSingleRowBitwise) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 1);
    // 83 and 768 run the rows=1 path's 4-vector unrolled steps and its
    // remainders; 1029 is longer than 64 vectors on every target, where
    // rows=1 switches to 1 x 8 tiles.
    for (size_t in : {5, 33, 83, 768, 1029}) {
      const size_t out = 19;
      for (size_t rows : {2, 3, 4, 5, 7, 37, 70}) {
        const auto x = random_vector(rng, rows * in), w = random_vector(rng, out * in);
        const auto bias = random_vector(rng, out);
        for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
          std::vector<float> batch(rows * out), single(out);
          matmul(path, x.data(), rows, w.data(), bias.data(), in, out, 0, out, batch.data());
          for (size_t i = 0; i < rows; ++i) {
            matmul(path, x.data() + i * in, 1, w.data(), bias.data(), in, out, 0, out,
                   single.data());
            ASSERT_TRUE(same_bits(single.data(), batch.data() + i * out, out))
                << "in=" << in << " rows=" << rows << " row " << i;
          }
          // Sub-batches starting at any row give the same bits too.
          const size_t start = rows / 3, count = rows - start;
          std::vector<float> part(count * out);
          matmul(path, x.data() + start * in, count, w.data(), bias.data(), in, out, 0, out,
                 part.data());
          ASSERT_TRUE(same_bits(part.data(), batch.data() + start * out, count * out));
        }
      }
    }
  });
}

// Any split of [0, out) into [o_begin, o_end) pieces (as the engine's threads
// do) gives the same bits as one call.
TEST(Matmul, OutputSplitDoesNotChangeBits) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 2);
    // in = 1029 is over 64 vectors on every target: there rows=1 mixes 1 x 8
    // tiles and single outputs, differently for every split.
    for (size_t in : {67, 1029}) {
      for (size_t rows : {1, 3, 4, 9}) {
        const size_t out = 45;
        const auto x = random_vector(rng, rows * in), w = random_vector(rng, out * in);
        std::vector<float> whole(rows * out);
        matmul(KernelPath::kSimd, x.data(), rows, w.data(), nullptr, in, out, 0, out, whole.data());
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<float> pieces(rows * out, NAN);
          size_t o = 0;
          while (o < out) {
            const size_t width = 1 + rng.below(trial % 2 ? 3 : 11);
            const size_t end = std::min(out, o + width);
            matmul(KernelPath::kSimd, x.data(), rows, w.data(), nullptr, in, out, o, end,
                   pieces.data());
            o = end;
          }
          ASSERT_TRUE(same_bits(whole.data(), pieces.data(), rows * out))
              << "rows=" << rows << " in=" << in;
        }
      }
    }
  });
}

// The same values at a different address (misaligned by 1..3 floats) give the
// same bits: the vector steps are anchored at k = 0, not at alignment.
TEST(Matmul, PointerAlignmentDoesNotChangeBits) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 3);
    const size_t rows = 6, in = 77, out = 11;
    const auto x = random_vector(rng, rows * in), w = random_vector(rng, out * in);
    std::vector<float> reference(rows * out);
    matmul(KernelPath::kSimd, x.data(), rows, w.data(), nullptr, in, out, 0, out, reference.data());
    for (size_t shift = 1; shift < 4; ++shift) {
      std::vector<float> x_moved(rows * in + shift), w_moved(out * in + shift);
      std::copy(x.begin(), x.end(), x_moved.begin() + shift);
      std::copy(w.begin(), w.end(), w_moved.begin() + shift);
      std::vector<float> y_moved(rows * out + shift);
      matmul(KernelPath::kSimd, x_moved.data() + shift, rows, w_moved.data() + shift, nullptr, in,
             out, 0, out, y_moved.data() + shift);
      ASSERT_TRUE(same_bits(reference.data(), y_moved.data() + shift, rows * out))
          << "shift " << shift;
    }
  });
}

}  // namespace
}  // namespace kvcheck::cpu
