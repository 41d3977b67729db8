// attend on every Highway target and K/V dtype against the scalar and a
// double reference, and the invariances of the attention kernels: a head's
// bits do not depend on the group, stride, alignment or storage layout
// (contiguous, paged, ring); every f16/bf16 pattern and q8_0 code widens
// exactly; a poisoned slot surfaces as NaN.
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

}  // namespace
}  // namespace kvcheck::cpu
