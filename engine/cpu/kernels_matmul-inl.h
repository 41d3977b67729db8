// Matrix products: register tiles whose accumulators are computed the same
// way in every tile shape (kernels-inl.h, first rule of the contract).

#if defined(KVCHECK_ENGINE_CPU_KERNELS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_MATMUL_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_MATMUL_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_MATMUL_INL_H_
#endif

#include <cstddef>

#include "engine/cpu/kernels_loads-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvcheck::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One register tile: kRows rows of x times kOuts rows of w. Each (row, out)
// pair owns one accumulator computed identically in every tile shape.
template <size_t kRows, size_t kOuts>
HWY_INLINE void MatmulTile(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w,
                           const float* HWY_RESTRICT bias, size_t in, size_t out, size_t i0,
                           size_t o0, float* HWY_RESTRICT y) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  VF acc[kRows][kOuts];
  const float* x_rows[kRows];
  const float* w_rows[kOuts];
  KVCHECK_UNROLL_FULLY
  for (size_t r = 0; r < kRows; ++r) {
    x_rows[r] = x + (i0 + r) * in;
    KVCHECK_UNROLL_FULLY
    for (size_t o = 0; o < kOuts; ++o) acc[r][o] = hn::Zero(df);
  }
  KVCHECK_UNROLL_FULLY
  for (size_t o = 0; o < kOuts; ++o) w_rows[o] = w + (o0 + o) * in;

  size_t k = 0;
  for (; k + lanes <= in; k += lanes) {
    VF xv[kRows];
    KVCHECK_UNROLL_FULLY
    for (size_t r = 0; r < kRows; ++r) xv[r] = hn::LoadU(df, x_rows[r] + k);
    KVCHECK_UNROLL_FULLY
    for (size_t o = 0; o < kOuts; ++o) {
      const VF wv = hn::LoadU(df, w_rows[o] + k);
      KVCHECK_UNROLL_FULLY
      for (size_t r = 0; r < kRows; ++r) acc[r][o] = hn::MulAdd(xv[r], wv, acc[r][o]);
    }
  }
  if (k != in) {
    const size_t remaining = in - k;
    VF xv[kRows];
    KVCHECK_UNROLL_FULLY
    for (size_t r = 0; r < kRows; ++r) xv[r] = LoadPadded(df, x_rows[r] + k, remaining);
    KVCHECK_UNROLL_FULLY
    for (size_t o = 0; o < kOuts; ++o) {
      const VF wv = LoadPadded(df, w_rows[o] + k, remaining);
      KVCHECK_UNROLL_FULLY
      for (size_t r = 0; r < kRows; ++r) acc[r][o] = hn::MulAdd(xv[r], wv, acc[r][o]);
    }
  }
  KVCHECK_UNROLL_FULLY
  for (size_t r = 0; r < kRows; ++r) {
    KVCHECK_UNROLL_FULLY
    for (size_t o = 0; o < kOuts; ++o) {
      float sum = SumLanes(df, acc[r][o]);
      if (bias != nullptr) sum += bias[o0 + o];
      y[(i0 + r) * out + o0 + o] = sum;
    }
  }
}

// One output of a matrix-vector product: the accumulator of MatmulTile<1, 1>
// (one vector stepping along k from 0, the zero-padded remainder, SumOfLanes,
// then the bias), unrolled four vectors deep along that same chain, so the
// bits equal those of every tile shape.
HWY_INLINE void MatvecOutput(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w_row,
                             const float* HWY_RESTRICT bias, size_t in, size_t o,
                             float* HWY_RESTRICT y) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  VF acc = hn::Zero(df);
  size_t k = 0;
  for (; k + 4 * lanes <= in; k += 4 * lanes) {
    acc = hn::MulAdd(hn::LoadU(df, x + k), hn::LoadU(df, w_row + k), acc);
    acc = hn::MulAdd(hn::LoadU(df, x + k + lanes), hn::LoadU(df, w_row + k + lanes), acc);
    acc = hn::MulAdd(hn::LoadU(df, x + k + 2 * lanes), hn::LoadU(df, w_row + k + 2 * lanes), acc);
    acc = hn::MulAdd(hn::LoadU(df, x + k + 3 * lanes), hn::LoadU(df, w_row + k + 3 * lanes), acc);
  }
  for (; k + lanes <= in; k += lanes) {
    acc = hn::MulAdd(hn::LoadU(df, x + k), hn::LoadU(df, w_row + k), acc);
  }
  if (k != in) {
    const size_t remaining = in - k;
    acc = hn::MulAdd(LoadPadded(df, x + k, remaining), LoadPadded(df, w_row + k, remaining), acc);
  }
  float sum = SumLanes(df, acc);
  if (bias != nullptr) sum += bias[o];
  y[o] = sum;
}

// Rows [i_begin, i_end) against outputs [o0, o0 + kOuts): 4-row tiles, then
// one tile for the 1..3 left over rows.
template <size_t kOuts>
HWY_INLINE void MatmulRowRange(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w,
                               const float* HWY_RESTRICT bias, size_t in, size_t out,
                               size_t i_begin, size_t i_end, size_t o0, float* HWY_RESTRICT y) {
  size_t i = i_begin;
  for (; i + 4 <= i_end; i += 4) MatmulTile<4, kOuts>(x, w, bias, in, out, i, o0, y);
  switch (i_end - i) {
    case 3:
      MatmulTile<3, kOuts>(x, w, bias, in, out, i, o0, y);
      break;
    case 2:
      MatmulTile<2, kOuts>(x, w, bias, in, out, i, o0, y);
      break;
    case 1:
      MatmulTile<1, kOuts>(x, w, bias, in, out, i, o0, y);
      break;
    default:
      break;
  }
}

// x: [rows][in];  w: [out][in];  bias: [out] or nullptr;  y: [rows][out]
void MatmulSimd(const float* HWY_RESTRICT x, size_t rows, const float* HWY_RESTRICT w,
                const float* HWY_RESTRICT bias, size_t in, size_t out, size_t o_begin, size_t o_end,
                float* HWY_RESTRICT y) {
  if (rows == 0 || o_begin >= o_end) return;
  if (rows == 1) {
    // Matrix-vector: bound by streaming w from DRAM. One weight row after the
    // other reads w as a single linear stream; interleaving 8 rows (a 1 x 8
    // tile) splits it into 8 streams `in` floats apart, which this machine
    // streams 10-25 % slower (docs/PERFORMANCE.md). Out-of-order execution
    // overlaps the independent chains of consecutive short rows.
    // Long rows (more than 64 vectors) make one chain per row the limit, so
    // those keep 8 rows in flight; both give the same bits.
    const DF df;
    if (in <= 64 * hn::Lanes(df)) {
      for (size_t o = o_begin; o < o_end; ++o) MatvecOutput(x, w + o * in, bias, in, o, y);
      return;
    }
    size_t o = o_begin;
    for (; o + 8 <= o_end; o += 8) MatmulTile<1, 8>(x, w, bias, in, out, 0, o, y);
    for (; o < o_end; ++o) MatvecOutput(x, w + o * in, bias, in, o, y);
    return;
  }
  // Row chunks keep the x rows that one pass over w reuses resident in L2.
  constexpr size_t kRowChunk = 64;
  for (size_t i_begin = 0; i_begin < rows; i_begin += kRowChunk) {
    const size_t i_end = std::min(rows, i_begin + kRowChunk);
    size_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) MatmulRowRange<4>(x, w, bias, in, out, i_begin, i_end, o, y);
    for (; o < o_end; ++o) MatmulRowRange<1>(x, w, bias, in, out, i_begin, i_end, o, y);
  }
}

}  // namespace kvcheck::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVCHECK_ENGINE_CPU_KERNELS_MATMUL_INL_H_
