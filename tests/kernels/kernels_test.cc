// Per-op tests of the CPU kernels: the SIMD path on every compiled and
// supported Highway target against the scalar reference and a double
// reference, with tolerances derived from forward error analysis (each bound
// is documented next to its helper and in docs/KERNELS.md), plus the bitwise
// invariance properties the engine's chunk/batch invariance rests on.
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

namespace kvcheck::cpu {
namespace {

constexpr double kUnitRoundoff = 0x1p-24;
// Documented (docs/KERNELS.md) and measured by ExpAndTanhUlpError below: the
// max error of the elementwise exp/tanh of either path, in ulps of the result.
constexpr double kExpUlp = 2.0;
constexpr double kTanhUlp = 4.0;
// First-order error bounds drop O(u^2) terms; this factor covers them.
constexpr double kSecondOrderSlack = 1.01;

constexpr uint64_t kSeed = 0x6b76636865636bULL;

double gamma(double n) {
  return n * kUnitRoundoff / (1.0 - n * kUnitRoundoff);
}

// Relative size of one ulp of a float result, as a bound: ulp(y) <= 2^-23 |y|.
constexpr double kUlpRelative = 0x1p-23;

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(next() >> 40) * 0x1p-24);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

std::vector<float> random_vector(Rng& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (float& f : v) f = rng.uniform(lo, hi);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Worst observed error/bound ratio per check, printed at the end so the
// report can quote it.
std::map<std::string, double>& worst_ratios() {
  static std::map<std::string, double> ratios;
  return ratios;
}

// Records |a - b| / bound, failing when it exceeds 1. NaN must match NaN.
void expect_within(const std::string& check, double a, double b, double bound,
                   const std::string& where) {
  if (std::isnan(a) || std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a) && std::isnan(b))
        << check << " " << where << ": " << a << " vs " << b;
    return;
  }
  const double diff = std::fabs(a - b);
  const double ratio = diff == 0.0 ? 0.0 : (bound > 0.0 ? diff / bound : HUGE_VAL);
  double& worst = worst_ratios()[check];
  worst = std::max(worst, ratio);
  EXPECT_LE(ratio, 1.0) << check << " " << where << ": " << a << " vs " << b << " bound " << bound;
}

// Runs fn once per compiled Highway target this CPU supports, with the SIMD
// path dispatching to exactly that target.
void for_each_simd_target(const std::function<void(const std::string&)>& fn) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    SCOPED_TRACE("target " + name);
    ASSERT_EQ(std::string(simd_target_name()), name) << "dispatch did not follow the mock";
    fn(name);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Each Highway target tested, for the report.
TEST(KernelTargets, ListsTestedTargets) {
  std::string list;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    list += std::string(hwy::TargetName(target)) + " ";
  }
  std::printf("simd targets tested: %s(best: %s)\n", list.c_str(), simd_target_name());
  EXPECT_FALSE(list.empty());
}

// ---------------------------------------------------------------------------
// matmul

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

// ---------------------------------------------------------------------------
// attend

struct KvRows {
  KvDtype dtype;
  size_t stride;
  std::vector<unsigned char> bytes;  // [n_keys][kv_row_bytes(dtype, stride)] as kv_store_row writes
  const void* data() const { return bytes.data(); }
  size_t row_bytes() const { return kv_row_bytes(dtype, stride); }
  unsigned char* row(size_t j) { return bytes.data() + j * row_bytes(); }
  const unsigned char* row(size_t j) const { return bytes.data() + j * row_bytes(); }
  // The value a kernel reads back: the stored element widened.
  double at(size_t j, size_t d) const { return kv_load(row(j), dtype, stride, d); }
  // Row j as a row of `dim` (<= stride) elements: the leading blocks' scales
  // and the first dim elements keep their meaning.   dst: kv_row_bytes(dtype, dim)
  void pack(size_t j, size_t dim, unsigned char* dst) const {
    if (dtype != KvDtype::kQ8_0) {
      std::memcpy(dst, row(j), dim * size_t(kv_dtype_bytes(dtype)));
      return;
    }
    std::memcpy(dst, row(j), 4 * q8_blocks(dim));
    std::memcpy(dst + 4 * q8_blocks(dim), row(j) + 4 * q8_blocks(stride), dim);
  }
};

KvRows random_kv(Rng& rng, KvDtype dtype, size_t n_keys, size_t dim, size_t stride) {
  KvRows rows{dtype, stride, {}};
  // A varying magnitude per row gives q8_0 rows whose scales differ.
  const auto values = random_vector(rng, n_keys * stride + 1, -2.0f, 2.0f);
  rows.bytes.resize(n_keys * rows.row_bytes() + 1);
  for (size_t j = 0; j < n_keys; ++j)
    kv_store_row(values.data() + j * stride, dtype, stride, rows.row(j));
  (void)dim;
  return rows;
}

// Exact (double) attention of one head and the bound on |computed - exact|
// of either path (first order; docs/KERNELS.md "attend"):
//   scores:  e_j = gamma_{dim+2} * scale * sum_d |q_d k_jd|
//   shift:   dt_j = e_j + max_i e_i + u |t_j|          (t_j = s_j - max)
//   exp:     rho_j = dt_j + kExpUlp * 2^-23            (relative error of p_j)
//   sums:    errS = gamma_n S + sum p_j rho_j,  errN_d = gamma_n sum p_j |v_jd| + sum p_j rho_j
//   |v_jd| divide:  |err out_d| <= (errN_d + |out_d| errS) / (S - errS) + u |out_d|
void exact_attention(const float* q, const KvRows& k, const KvRows& v, size_t n_keys, size_t dim,
                     double scale, std::vector<double>& out, std::vector<double>& bound) {
  out.assign(dim, 0.0);
  bound.assign(dim, 0.0);
  if (n_keys == 0) return;
  std::vector<double> s(n_keys), e(n_keys);
  for (size_t j = 0; j < n_keys; ++j) {
    double dot = 0.0, magnitude = 0.0;
    for (size_t d = 0; d < dim; ++d) {
      dot += q[d] * k.at(j, d);
      magnitude += std::fabs(q[d] * k.at(j, d));
    }
    s[j] = dot * scale;
    e[j] = gamma(double(dim + 2)) * magnitude * scale;
  }
  const double max_s = *std::max_element(s.begin(), s.end());
  const double max_e = *std::max_element(e.begin(), e.end());
  double sum = 0.0, err_sum = 0.0;
  std::vector<double> p(n_keys), rho(n_keys);
  for (size_t j = 0; j < n_keys; ++j) {
    p[j] = std::exp(s[j] - max_s);
    rho[j] = e[j] + max_e + kUnitRoundoff * std::fabs(s[j] - max_s) + kExpUlp * kUlpRelative;
    sum += p[j];
    err_sum += p[j] * rho[j];
  }
  err_sum += gamma(double(n_keys)) * sum;
  for (size_t d = 0; d < dim; ++d) {
    double numerator = 0.0, err_numerator = 0.0, magnitude = 0.0;
    for (size_t j = 0; j < n_keys; ++j) {
      numerator += p[j] * v.at(j, d);
      magnitude += p[j] * std::fabs(v.at(j, d));
      err_numerator += p[j] * rho[j] * std::fabs(v.at(j, d));
    }
    err_numerator += gamma(double(n_keys)) * magnitude;
    out[d] = numerator / sum;
    bound[d] =
        kSecondOrderSlack * ((err_numerator + std::fabs(out[d]) * err_sum) / (sum - err_sum) +
                             kUnitRoundoff * std::fabs(out[d]));
  }
}

TEST(Attend, SimdMatchesScalarWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 4);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (size_t dim : {1, 3, 7, 16, 17, 64, 70}) {
        for (size_t n_keys : {1, 2, 3, 15, 16, 17, 130}) {
          for (size_t group : {1, 3, 4, 5}) {
            const size_t stride = dim + (n_keys % 2) * 3;
            const KvRows k = random_kv(rng, dtype, n_keys, dim, stride);
            const KvRows v = random_kv(rng, dtype, n_keys, dim, stride);
            const auto q = random_vector(rng, group * dim, -3.0f, 3.0f);
            const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
            std::vector<float> scores(attend_scratch_floats(group, n_keys));
            std::vector<float> out_simd(group * dim), out_scalar(group * dim);
            attend(KernelPath::kSimd, q.data(), group, k.data(), v.data(), dtype, stride, n_keys,
                   dim, scale, scores.data(), out_simd.data());
            attend(KernelPath::kScalar, q.data(), group, k.data(), v.data(), dtype, stride, n_keys,
                   dim, scale, scores.data(), out_scalar.data());
            std::vector<double> exact, bound;
            for (size_t g = 0; g < group; ++g) {
              exact_attention(q.data() + g * dim, k, v, n_keys, dim, scale, exact, bound);
              for (size_t d = 0; d < dim; ++d) {
                const std::string where = target + " " + kv_dtype_name(dtype) +
                                          " dim=" + std::to_string(dim) +
                                          " keys=" + std::to_string(n_keys) +
                                          " g=" + std::to_string(g) + " d=" + std::to_string(d);
                const double simd = out_simd[g * dim + d], scalar = out_scalar[g * dim + d];
                expect_within("attend simd-vs-scalar", simd, scalar, 2 * bound[d], where);
                expect_within("attend simd-vs-exact", simd, exact[d], bound[d], where);
                expect_within("attend scalar-vs-exact", scalar, exact[d], bound[d], where);
              }
            }
          }
        }
      }
    }
  });
}

// Head g of a group gives the same bits as that head alone, whatever the
// group size, KV row stride, pointer alignment or scratch contents.
TEST(Attend, HeadResultIndependentOfGroupStrideAndAlignment) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 5);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (size_t dim : {8, 17, 64}) {
        for (size_t n_keys : {1, 5, 33, 128}) {
          const size_t group = 4, padded_stride = dim + 5;
          const KvRows k = random_kv(rng, dtype, n_keys, dim, padded_stride);
          const KvRows v = random_kv(rng, dtype, n_keys, dim, padded_stride);
          const auto q = random_vector(rng, group * dim, -3.0f, 3.0f);
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
            std::vector<float> scores(attend_scratch_floats(group, n_keys), NAN);
            std::vector<float> grouped(group * dim);
            attend(path, q.data(), group, k.data(), v.data(), dtype, padded_stride, n_keys, dim,
                   scale, scores.data(), grouped.data());
            // Packed copies (stride == dim), shifted by one element (q8_0:
            // one byte, so its scales are read unaligned).
            const size_t elem = static_cast<size_t>(kv_dtype_bytes(dtype));
            const size_t packed_row = kv_row_bytes(dtype, dim);
            std::vector<unsigned char> k_packed(n_keys * packed_row + elem),
                v_packed(n_keys * packed_row + elem);
            for (size_t j = 0; j < n_keys; ++j) {
              k.pack(j, dim, k_packed.data() + elem + j * packed_row);
              v.pack(j, dim, v_packed.data() + elem + j * packed_row);
            }
            for (size_t g = 0; g < group; ++g) {
              std::vector<float> q_moved(dim + 1), single(dim + 1), scratch(n_keys + 1, 1e30f);
              std::copy(q.begin() + g * dim, q.begin() + (g + 1) * dim, q_moved.begin() + 1);
              attend(path, q_moved.data() + 1, 1, k_packed.data() + elem, v_packed.data() + elem,
                     dtype, dim, n_keys, dim, scale, scratch.data() + 1, single.data() + 1);
              ASSERT_TRUE(same_bits(single.data() + 1, grouped.data() + g * dim, dim))
                  << kv_dtype_name(dtype) << " dim=" << dim << " keys=" << n_keys << " head " << g;
            }
          }
        }
      }
    }
  });
}

// Paged storage: the same rows scattered over blocks of any size (in
// shuffled order, odd sizes that split the even/odd value pairs) give the
// same bits as contiguous rows, on every path, target and dtype.
TEST(Attend, PagedRowsGiveTheContiguousBits) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 9);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kQ8_0}) {
      for (size_t dim : {8, 17, 64}) {
        for (size_t n_keys : {1, 5, 33, 128}) {
          const size_t group = 2, stride = dim;
          const KvRows k = random_kv(rng, dtype, n_keys, dim, stride);
          const KvRows v = random_kv(rng, dtype, n_keys, dim, stride);
          const auto q = random_vector(rng, group * dim, -3.0f, 3.0f);
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          const size_t row = kv_row_bytes(dtype, stride);
          for (size_t block : {1, 2, 3, 16, 32}) {
            const size_t n_blocks = (n_keys + block - 1) / block;
            // Blocks in reverse order in one pool: [n_blocks][block][stride].
            std::vector<unsigned char> k_pool(n_blocks * block * row), v_pool(k_pool.size());
            std::vector<const void*> k_blocks(n_blocks), v_blocks(n_blocks);  // [block] starts
            for (size_t b = 0; b < n_blocks; ++b) {
              k_blocks[b] = k_pool.data() + (n_blocks - 1 - b) * block * row;
              v_blocks[b] = v_pool.data() + (n_blocks - 1 - b) * block * row;
            }
            for (size_t j = 0; j < n_keys; ++j) {
              const size_t at = (n_blocks - 1 - j / block) * block * row + (j % block) * row;
              std::memcpy(k_pool.data() + at, static_cast<const unsigned char*>(k.data()) + j * row,
                          row);
              std::memcpy(v_pool.data() + at, static_cast<const unsigned char*>(v.data()) + j * row,
                          row);
            }
            for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
              std::vector<float> scores(attend_scratch_floats(group, n_keys));
              std::vector<float> contiguous(group * dim), paged(group * dim);
              attend(path, q.data(), group, k.data(), v.data(), dtype, stride, n_keys, dim, scale,
                     scores.data(), contiguous.data());
              attend_paged(path, q.data(), group, k_blocks.data(), v_blocks.data(), block, dtype,
                           stride, n_keys, dim, scale, scores.data(), paged.data());
              ASSERT_TRUE(same_bits(paged.data(), contiguous.data(), group * dim))
                  << kv_dtype_name(dtype) << " dim=" << dim << " keys=" << n_keys
                  << " block=" << block;
            }
          }
        }
      }
    }
  });
}

// A sliding-window ring: the window's rows stored from any first slot of a
// ring of R rows (wrapping past its end) give the bits of the same rows laid
// out contiguously, on every path, target and dtype.
TEST(Attend, RingRowsGiveTheContiguousBits) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 10);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (size_t dim : {8, 17, 64}) {
        for (size_t n_keys : {1, 5, 33}) {
          const size_t group = 3, stride = dim;
          const KvRows k = random_kv(rng, dtype, n_keys, dim, stride);
          const KvRows v = random_kv(rng, dtype, n_keys, dim, stride);
          const auto q = random_vector(rng, group * dim, -3.0f, 3.0f);
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          const size_t row = kv_row_bytes(dtype, stride);
          for (size_t ring : {n_keys, n_keys + 1, n_keys + 7}) {
            for (size_t first : {size_t{0}, ring / 2, ring - 1}) {
              std::vector<unsigned char> k_ring(ring * row), v_ring(ring * row);  // [ring][row]
              for (size_t j = 0; j < n_keys; ++j) {
                const size_t at = ((first + j) % ring) * row;
                std::memcpy(k_ring.data() + at,
                            static_cast<const unsigned char*>(k.data()) + j * row, row);
                std::memcpy(v_ring.data() + at,
                            static_cast<const unsigned char*>(v.data()) + j * row, row);
              }
              for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
                std::vector<float> scores(attend_scratch_floats(group, n_keys));
                std::vector<float> contiguous(group * dim), ringed(group * dim);
                attend(path, q.data(), group, k.data(), v.data(), dtype, stride, n_keys, dim, scale,
                       scores.data(), contiguous.data());
                attend_ring(path, q.data(), group, k_ring.data(), v_ring.data(), ring, first, dtype,
                            stride, n_keys, dim, scale, scores.data(), ringed.data());
                ASSERT_TRUE(same_bits(ringed.data(), contiguous.data(), group * dim))
                    << kv_dtype_name(dtype) << " dim=" << dim << " keys=" << n_keys
                    << " ring=" << ring << " first=" << first;
              }
            }
          }
        }
      }
    }
  });
}

// With one key the softmax weight is exactly 1, so the output is the stored
// value row widened: checks widening of every bf16 and f16 bit pattern,
// subnormals, infinities and NaN included, against the scalar widening.
TEST(Attend, WidensEveryHalfPatternExactly) {
  for_each_simd_target([](const std::string&) {
    const size_t dim = 65536;
    const std::vector<uint16_t> zero_key(dim, 0);
    std::vector<uint16_t> value(dim);
    for (size_t i = 0; i < dim; ++i) value[i] = static_cast<uint16_t>(i);
    const std::vector<float> q(dim, 0.0f);
    for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF16}) {
      for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
        std::vector<float> out(dim), scores(1);
        attend(path, q.data(), 1, zero_key.data(), value.data(), dtype, dim, 1, dim, 1.0f,
               scores.data(), out.data());
        for (size_t i = 0; i < dim; ++i) {
          const uint16_t bits = static_cast<uint16_t>(i);
          const float widened = dtype == KvDtype::kBF16 ? bf16_to_float(bits) : f16_to_float(bits);
          // The value accumulates onto +0, so -0 reads back as +0.
          ASSERT_TRUE(out[i] == widened || (std::isnan(out[i]) && std::isnan(widened)))
              << kv_dtype_name(dtype) << " bits 0x" << std::hex << i << ": " << out[i] << " vs "
              << widened;
        }
      }
    }
  });
}

// q8_0, one key: the output is the value row read back, float(code) * scale
// for every code and for scales across the float range (subnormal, NaN and
// infinite ones included), in whole and partial blocks and vectors.
TEST(Attend, WidensEveryQ8CodeAndScaleExactly) {
  for_each_simd_target([](const std::string&) {
    const float scales[] = {1.0f, 0x1p-140f, 3.1e-5f, 0.0157f, 7.0f, 1e30f, HUGE_VALF, NAN};
    for (size_t dim : {255, 256, 7}) {
      const size_t blocks = q8_blocks(dim);
      std::vector<unsigned char> key(kv_row_bytes(KvDtype::kQ8_0, dim), 0);
      std::vector<unsigned char> value(key.size(), 0);
      for (size_t b = 0; b < blocks; ++b) {
        std::memcpy(value.data() + 4 * b, &scales[b % std::size(scales)], 4);
      }
      for (size_t i = 0; i < dim; ++i) value[4 * blocks + i] = static_cast<unsigned char>(i + 1);
      const std::vector<float> q(dim, 0.0f);
      for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
        std::vector<float> out(dim), scores(1);
        attend(path, q.data(), 1, key.data(), value.data(), KvDtype::kQ8_0, dim, 1, dim, 1.0f,
               scores.data(), out.data());
        for (size_t i = 0; i < dim; ++i) {
          const float expected = kv_load(value.data(), KvDtype::kQ8_0, dim, i);
          const float product = float(int8_t(i + 1)) * scales[(i / kQ8Block) % std::size(scales)];
          ASSERT_TRUE(expected == product || (std::isnan(expected) && std::isnan(product)));
          ASSERT_TRUE(out[i] == expected || (std::isnan(out[i]) && std::isnan(expected)))
              << "dim " << dim << " element " << i << ": " << out[i] << " vs " << expected;
        }
      }
    }
  });
}

// A NaN (poisoned, never written) key or value makes the output NaN on both
// paths, so a read of an unwritten slot cannot hide.
TEST(Attend, PoisonedSlotSurfacesAsNaN) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 6);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      const size_t dim = 24, n_keys = 40;
      for (bool poison_key : {true, false}) {
        KvRows k = random_kv(rng, dtype, n_keys, dim, dim);
        KvRows v = random_kv(rng, dtype, n_keys, dim, dim);
        KvRows& target_rows = poison_key ? k : v;
        // Element 3 of row 29 (q8_0: its block's scale, so the whole block).
        if (dtype == KvDtype::kQ8_0) {
          kv_poison_row(target_rows.row(29), dtype, dim);
        } else if (dtype == KvDtype::kF32) {
          const float nan = NAN;
          std::memcpy(target_rows.row(29) + 3 * 4, &nan, 4);
        } else {
          const uint16_t bits = poison_bits16(dtype);
          std::memcpy(target_rows.row(29) + 3 * 2, &bits, 2);
        }
        const auto q = random_vector(rng, dim);
        for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
          std::vector<float> scores(n_keys), out(dim);
          attend(path, q.data(), 1, k.data(), v.data(), dtype, dim, n_keys, dim, 0.2f,
                 scores.data(), out.data());
          if (poison_key) {
            for (float o : out) ASSERT_TRUE(std::isnan(o)) << kv_dtype_name(dtype);
          } else {
            ASSERT_TRUE(std::isnan(out[3])) << kv_dtype_name(dtype);
          }
        }
      }
    }
  });
}

TEST(Attend, NoKeysGivesZeros) {
  const std::vector<float> q(2 * 5, 1.0f);
  for (KernelPath path : {KernelPath::kScalar, KernelPath::kSimd}) {
    std::vector<float> out(2 * 5, 7.0f);
    attend(path, q.data(), 2, nullptr, nullptr, KvDtype::kF32, 5, 0, 5, 1.0f, nullptr, out.data());
    EXPECT_EQ(out, std::vector<float>(10, 0.0f));
  }
}

// ---------------------------------------------------------------------------
// Norms

// RMSNorm, per element (either path):
//   sum of squares within gamma_w; /w, +eps, sqrt, 1/ and two multiplies add
//   six roundings, sqrt halves the relative error of its argument:
//   |err y_i| <= |y_i| (gamma_w / 2 + 6u).
TEST(Norms, RmsNormWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 7);
    for (size_t width : {1, 3, 7, 15, 16, 17, 33, 768, 1001}) {
      for (size_t offset : {0, 1}) {
        const auto x_store = random_vector(rng, width + offset, -4.0f, 4.0f);
        const auto gain = random_vector(rng, width, 0.5f, 1.5f);
        const float* x = x_store.data() + offset;
        const float eps = 1e-5f;
        std::vector<float> y_simd(width), y_scalar(width);
        rms_norm(KernelPath::kSimd, x, gain.data(), width, eps, y_simd.data());
        rms_norm(KernelPath::kScalar, x, gain.data(), width, eps, y_scalar.data());
        double sum_sq = 0.0;
        for (size_t i = 0; i < width; ++i) sum_sq += double{x[i]} * x[i];
        const double inv = 1.0 / std::sqrt(sum_sq / double(width) + eps);
        for (size_t i = 0; i < width; ++i) {
          const double exact = x[i] * inv * gain[i];
          const double bound =
              kSecondOrderSlack * std::fabs(exact) * (gamma(double(width)) / 2 + 6 * kUnitRoundoff);
          const std::string where = target + " width=" + std::to_string(width);
          expect_within("rms_norm simd-vs-scalar", y_simd[i], y_scalar[i], 2 * bound, where);
          expect_within("rms_norm simd-vs-exact", y_simd[i], exact, bound, where);
        }
      }
    }
  });
}

// LayerNorm, per element (either path), with c_i = x_i - mean, r = 1/sqrt(var+eps):
//   mean:  dm = gamma_w sum|x| / w + u |mean|
//   c_i:   dc_i = dm + u |c_i|
//   r:     relative error gamma_{w+1} / 2 (sum of squares; the shift of the
//          mean only adds dm^2, second order) + 4u (/w, +eps, sqrt, 1/)
//   y_i:   |err| <= |g_i| r (dc_i + |c_i| (gamma_{w+1}/2 + 4u + 2u)) + u |y_i|
TEST(Norms, LayerNormWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 8);
    for (size_t width : {1, 3, 7, 15, 16, 17, 33, 768, 1001}) {
      for (bool with_bias : {false, true}) {
        const auto x_store = random_vector(rng, width + 1, 1.0f, 3.0f);  // nonzero mean
        const auto gain = random_vector(rng, width, 0.5f, 1.5f);
        const auto bias = random_vector(rng, width);
        const float* x = x_store.data() + 1;
        const float* b = with_bias ? bias.data() : nullptr;
        const float eps = 1e-5f;
        std::vector<float> y_simd(width), y_scalar(width);
        layer_norm(KernelPath::kSimd, x, gain.data(), b, width, eps, y_simd.data());
        layer_norm(KernelPath::kScalar, x, gain.data(), b, width, eps, y_scalar.data());
        double sum = 0.0, sum_abs = 0.0;
        for (size_t i = 0; i < width; ++i) sum += x[i], sum_abs += std::fabs(x[i]);
        const double mean = sum / double(width);
        double var = 0.0;
        for (size_t i = 0; i < width; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= double(width);
        const double r = 1.0 / std::sqrt(var + eps);
        const double dm =
            gamma(double(width)) * sum_abs / double(width) + kUnitRoundoff * std::fabs(mean);
        const double rel_r = gamma(double(width + 1)) / 2 + 6 * kUnitRoundoff;
        for (size_t i = 0; i < width; ++i) {
          const double c = x[i] - mean;
          const double exact = c * r * gain[i] + (b ? b[i] : 0.0);
          const double bound =
              kSecondOrderSlack *
              (std::fabs(gain[i]) * r * (dm + kUnitRoundoff * std::fabs(c) + std::fabs(c) * rel_r) +
               kUnitRoundoff * std::fabs(exact));
          const std::string where = target + " width=" + std::to_string(width);
          expect_within("layer_norm simd-vs-scalar", y_simd[i], y_scalar[i], 2 * bound, where);
          expect_within("layer_norm simd-vs-exact", y_simd[i], exact, bound, where);
        }
      }
    }
  });
}

TEST(Norms, ResultIndependentOfAlignmentAndInPlace) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 9);
    const size_t width = 83;
    const auto x = random_vector(rng, width), gain = random_vector(rng, width);
    const auto bias = random_vector(rng, width);
    std::vector<float> ln(width), rms(width);
    layer_norm(KernelPath::kSimd, x.data(), gain.data(), bias.data(), width, 1e-5f, ln.data());
    rms_norm(KernelPath::kSimd, x.data(), gain.data(), width, 1e-6f, rms.data());
    std::vector<float> moved(width + 3);
    std::copy(x.begin(), x.end(), moved.begin() + 3);
    layer_norm(KernelPath::kSimd, moved.data() + 3, gain.data(), bias.data(), width, 1e-5f,
               moved.data() + 3);
    EXPECT_TRUE(same_bits(ln.data(), moved.data() + 3, width));
    std::copy(x.begin(), x.end(), moved.begin() + 2);
    rms_norm(KernelPath::kSimd, moved.data() + 2, gain.data(), width, 1e-6f, moved.data() + 2);
    EXPECT_TRUE(same_bits(rms.data(), moved.data() + 2, width));
  });
}

// ---------------------------------------------------------------------------
// Elementwise

// Max error in ulps of the result against double exp/tanh, over a dense sweep.
double max_ulp_error(KernelPath path, bool is_exp, float lo, float hi, size_t samples) {
  std::vector<float> x(samples);
  for (size_t i = 0; i < samples; ++i) {
    x[i] = lo + (hi - lo) * static_cast<float>(static_cast<double>(i) / double(samples - 1));
  }
  std::vector<float> y = x;
  if (is_exp) {
    exp_inplace(path, y.data(), samples);
  } else {
    tanh_inplace(path, y.data(), samples);
  }
  double worst = 0.0;
  for (size_t i = 0; i < samples; ++i) {
    const double exact = is_exp ? std::exp(double{x[i]}) : std::tanh(double{x[i]});
    if (std::fabs(exact) < 0x1p-126) continue;  // subnormal results: absolute error only
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    worst = std::max(worst, std::fabs(y[i] - exact) / ulp);
  }
  return worst;
}

TEST(Elementwise, ExpAndTanhUlpErrorWithinDocumentedBound) {
  const double scalar_exp = max_ulp_error(KernelPath::kScalar, true, -87.0f, 88.0f, 1 << 20);
  const double scalar_tanh = max_ulp_error(KernelPath::kScalar, false, -10.0f, 10.0f, 1 << 20);
  std::printf("scalar: exp max %.3f ulp, tanh max %.3f ulp\n", scalar_exp, scalar_tanh);
  EXPECT_LE(scalar_exp, kExpUlp);
  EXPECT_LE(scalar_tanh, kTanhUlp);
  for_each_simd_target([](const std::string& target) {
    const double exp_ulp = max_ulp_error(KernelPath::kSimd, true, -87.0f, 88.0f, 1 << 20);
    const double tanh_ulp = max_ulp_error(KernelPath::kSimd, false, -10.0f, 10.0f, 1 << 20);
    const double tanh_small = max_ulp_error(KernelPath::kSimd, false, -0.01f, 0.01f, 1 << 16);
    std::printf("%s: exp max %.3f ulp, tanh max %.3f ulp (|x|<0.01: %.3f)\n", target.c_str(),
                exp_ulp, tanh_ulp, tanh_small);
    EXPECT_LE(exp_ulp, kExpUlp);
    EXPECT_LE(tanh_ulp, kTanhUlp);
    EXPECT_LE(tanh_small, kTanhUlp);
  });
}

TEST(Elementwise, SpecialValuesMatchScalarSemantics) {
  const std::vector<float> inputs = {0.0f,    -0.0f, 1e-30f, -1e-30f,   88.0f,      89.0f, 100.0f,
                                     -100.0f, 1e30f, -1e30f, HUGE_VALF, -HUGE_VALF, NAN};
  for_each_simd_target([&](const std::string& target) {
    std::vector<float> exp_simd = inputs, exp_scalar = inputs;
    exp_inplace(KernelPath::kSimd, exp_simd.data(), inputs.size());
    exp_inplace(KernelPath::kScalar, exp_scalar.data(), inputs.size());
    std::vector<float> tanh_simd = inputs, tanh_scalar = inputs;
    tanh_inplace(KernelPath::kSimd, tanh_simd.data(), inputs.size());
    tanh_inplace(KernelPath::kScalar, tanh_scalar.data(), inputs.size());
    std::vector<float> silu_simd = inputs, silu_scalar = inputs;
    const std::vector<float> ones(inputs.size(), 1.0f);
    silu_mul(KernelPath::kSimd, silu_simd.data(), ones.data(), inputs.size());
    silu_mul(KernelPath::kScalar, silu_scalar.data(), ones.data(), inputs.size());
    std::vector<float> gelu_simd = inputs, gelu_scalar = inputs;
    gelu_tanh(KernelPath::kSimd, gelu_simd.data(), inputs.size());
    gelu_tanh(KernelPath::kScalar, gelu_scalar.data(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string where = target + " x=" + std::to_string(inputs[i]);
      const auto close = [](float a, float b) {
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
        if (std::isinf(a) || std::isinf(b)) return a == b;
        return std::fabs(double{a} - b) <= 8 * kUlpRelative * std::fabs(double{b}) + 1e-37;
      };
      EXPECT_TRUE(close(exp_simd[i], exp_scalar[i])) << where << " exp " << exp_simd[i];
      EXPECT_TRUE(close(tanh_simd[i], tanh_scalar[i])) << where << " tanh " << tanh_simd[i];
      EXPECT_TRUE(close(silu_simd[i], silu_scalar[i])) << where << " silu " << silu_simd[i];
      EXPECT_TRUE(close(gelu_simd[i], gelu_scalar[i])) << where << " gelu " << gelu_simd[i];
    }
  });
}

// GELU (tanh form), per element (either path), a = c (x + k x^3), t = tanh(a):
//   da = gamma_5 c (|x| + k |x|^3)            (five roundings build a)
//   dt = (1 - t^2) da + kTanhUlp 2^-23 |t|
//   |err y| <= |x|/2 (dt + u |1 + t|) + u |y|
// SiLU * up, per element, e = exp(-g):
//   |err y| <= |y| (kExpUlp 2^-23 e / (1 + e) + 3u)
TEST(Elementwise, ActivationsWithinDerivedBoundOnEveryTarget) {
  for_each_simd_target([](const std::string& target) {
    Rng rng(kSeed + 10);
    for (size_t n : {0, 1, 3, 7, 15, 16, 17, 1000}) {
      const auto x = random_vector(rng, n, -8.0f, 8.0f);
      const auto up = random_vector(rng, n, -2.0f, 2.0f);
      std::vector<float> gelu_simd = x, gelu_scalar = x, silu_simd = x, silu_scalar = x;
      gelu_tanh(KernelPath::kSimd, gelu_simd.data(), n);
      gelu_tanh(KernelPath::kScalar, gelu_scalar.data(), n);
      silu_mul(KernelPath::kSimd, silu_simd.data(), up.data(), n);
      silu_mul(KernelPath::kScalar, silu_scalar.data(), up.data(), n);
      const double c = 0.7978845608028654, k = 0.044715;
      for (size_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double a = c * (v + k * v * v * v);
        const double t = std::tanh(a);
        const double gelu = 0.5 * v * (1.0 + t);
        const double da = gamma(5) * c * (std::fabs(v) + k * std::fabs(v * v * v));
        const double dt = (1.0 - t * t) * da + kTanhUlp * kUlpRelative * std::fabs(t);
        const double gelu_bound =
            kSecondOrderSlack * (std::fabs(v) / 2 * (dt + kUnitRoundoff * std::fabs(1.0 + t)) +
                                 kUnitRoundoff * std::fabs(gelu));
        const std::string where = target + " x=" + std::to_string(v);
        expect_within("gelu simd-vs-scalar", gelu_simd[i], gelu_scalar[i], 2 * gelu_bound, where);
        expect_within("gelu simd-vs-exact", gelu_simd[i], gelu, gelu_bound, where);
        const double e = std::exp(-v);
        const double silu = v / (1.0 + e) * up[i];
        const double silu_bound = kSecondOrderSlack * std::fabs(silu) *
                                  (kExpUlp * kUlpRelative * e / (1.0 + e) + 3 * kUnitRoundoff);
        expect_within("silu simd-vs-scalar", silu_simd[i], silu_scalar[i], 2 * silu_bound, where);
        expect_within("silu simd-vs-exact", silu_simd[i], silu, silu_bound, where);
      }
    }
  });
}

// An element's bits do not depend on where it sits in the array (vector body
// or padded tail) nor on the array's alignment.
TEST(Elementwise, ElementBitsIndependentOfPosition) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 11);
    const size_t n = 203;
    const auto x = random_vector(rng, n, -6.0f, 6.0f), up = random_vector(rng, n);
    std::vector<float> gelu_all = x, silu_all = x, add_all = x;
    gelu_tanh(KernelPath::kSimd, gelu_all.data(), n);
    silu_mul(KernelPath::kSimd, silu_all.data(), up.data(), n);
    add_inplace(KernelPath::kSimd, add_all.data(), up.data(), n);
    for (size_t start = 0; start < n; start += 1 + start % 7) {
      const size_t count = std::min(n - start, 1 + start % 19);
      std::vector<float> gelu_part(x.begin() + start, x.begin() + start + count);
      std::vector<float> silu_part = gelu_part, add_part = gelu_part;
      gelu_tanh(KernelPath::kSimd, gelu_part.data(), count);
      silu_mul(KernelPath::kSimd, silu_part.data(), up.data() + start, count);
      add_inplace(KernelPath::kSimd, add_part.data(), up.data() + start, count);
      ASSERT_TRUE(same_bits(gelu_part.data(), gelu_all.data() + start, count)) << start;
      ASSERT_TRUE(same_bits(silu_part.data(), silu_all.data() + start, count)) << start;
      ASSERT_TRUE(same_bits(add_part.data(), add_all.data() + start, count)) << start;
    }
  });
}

// Addition rounds identically on both paths: bitwise equal.
TEST(Elementwise, AddInplaceEqualsScalarBitwise) {
  for_each_simd_target([](const std::string&) {
    Rng rng(kSeed + 12);
    for (size_t n : {0, 1, 15, 16, 17, 1000}) {
      const auto y = random_vector(rng, n), x = random_vector(rng, n);
      std::vector<float> simd = y, scalar = y;
      add_inplace(KernelPath::kSimd, simd.data(), x.data(), n);
      add_inplace(KernelPath::kScalar, scalar.data(), x.data(), n);
      ASSERT_TRUE(same_bits(simd.data(), scalar.data(), n)) << n;
    }
  });
}

// ---------------------------------------------------------------------------
// kv_store

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

// Prints the worst error/bound ratios seen by every check above (gtest runs
// tests in declaration order within the binary unless shuffled).
TEST(ZzReport, WorstErrorBoundRatios) {
  for (const auto& [check, ratio] : worst_ratios()) {
    std::printf("worst error/bound %-26s %.4f\n", check.c_str(), ratio);
  }
  SUCCEED();
}

}  // namespace
}  // namespace kvcheck::cpu
