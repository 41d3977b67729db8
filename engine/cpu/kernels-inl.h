// SIMD bodies of the CPU kernels, compiled once per Highway target through
// hwy/foreach_target.h (see kernels.cc, the only dispatch point).
//
// How invariance is kept (docs/KERNELS.md has the full story):
// - Every dot product (matmul output, attention score) owns one vector
//   accumulator that steps along the reduction index from 0 in whole vectors;
//   the remainder is loaded zero-padded into one more whole vector, and the
//   lanes are summed with SumOfLanes at the end. Register tiles only decide
//   how many of these independent accumulators run side by side, never how
//   any one of them is computed.
// - Reductions over keys are anchored at key 0: the softmax sum steps over
//   whole vectors of keys from 0; the weighted sum of values keeps two chains
//   per output lane (even and odd keys) that are added at the end.
// - Elementwise steps run the tail through the same vector code on a
//   zero-padded copy, so an element's bits never depend on where it sits.
// - Loads never peel for alignment; LoadU everywhere.

#if defined(KVCHECK_ENGINE_CPU_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/kv_dtype.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvcheck::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register tiles are arrays of vectors indexed by compile-time loops; unless
// those loops are unrolled completely the accumulators live in memory.
#ifndef KVCHECK_UNROLL_FULLY
#define KVCHECK_UNROLL_FULLY HWY_UNROLL(16)
#endif

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Largest number of lanes of any vector on this architecture, for padded copies.
template <typename T>
constexpr size_t kMaxLanesOf = hwy::kMaxVectorSize / sizeof(T);

// Loads `count` (< Lanes(d)) elements, the other lanes zero. A full-width
// masked load would read past the end of the buffer on targets without
// fault-suppressing masked loads, so the remainder goes through a copy.
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadPadded(D d, const T* HWY_RESTRICT src, size_t count) {
  HWY_ALIGN T padded[kMaxLanesOf<T>] = {};
  std::memcpy(padded, src, count * sizeof(T));
  return hn::Load(d, padded);
}

// Stores the first `count` (< Lanes(d)) lanes of v.
template <class D, typename T>
HWY_INLINE void StorePartial(D d, hn::Vec<D> v, T* HWY_RESTRICT dst, size_t count) {
  HWY_ALIGN T padded[kMaxLanesOf<T>];
  hn::Store(v, d, padded);
  std::memcpy(dst, padded, count * sizeof(T));
}

// f16 -> f32 exactly as f16_to_float: F16C on AVX2/AVX3 is exact; Highway's
// emulation elsewhere maps inf/NaN to finite values, so those targets use
// integer code that treats exponent 31 like the scalar reference.
HWY_INLINE VF WidenF16(DF df, hn::Vec<hn::Rebind<uint16_t, DF>> bits16) {
#if (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && \
    !defined(HWY_DISABLE_F16C)
  const hn::Rebind<hwy::float16_t, DF> df16;
  return hn::PromoteTo(df, hn::BitCast(df16, bits16));
#else
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const auto bits = hn::PromoteTo(du32, bits16);
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du32, 0x8000u)));
  const auto exponent = hn::And(hn::ShiftRight<10>(bits), hn::Set(du32, 0x1Fu));
  const auto mantissa = hn::And(bits, hn::Set(du32, 0x3FFu));
  const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(exponent, hn::Set(du32, 127u - 15u))),
                             hn::ShiftLeft<13>(mantissa));
  const auto inf_nan = hn::Or(hn::Set(du32, 0x7F800000u), hn::ShiftLeft<13>(mantissa));
  const auto subnormal = hn::BitCast(
      du32, hn::Mul(hn::ConvertTo(df, hn::BitCast(di32, mantissa)), hn::Set(df, 0x1p-24f)));
  const auto magnitude =
      hn::IfThenElse(hn::Eq(exponent, hn::Zero(du32)), subnormal,
                     hn::IfThenElse(hn::Eq(exponent, hn::Set(du32, 31u)), inf_nan, normal));
  return hn::BitCast(df, hn::Or(sign, magnitude));
#endif
}

// The q8_0 scale of each lane for elements index.. of a row whose scales
// are its first `blocks` floats. index is a multiple of Lanes(df), so where
// Lanes divides the block size (every x86 target) the lanes share a block.
HWY_INLINE VF Q8LaneScales(DF df, const unsigned char* HWY_RESTRICT row, size_t index,
                           size_t blocks) {
  const size_t lanes = hn::Lanes(df);
  float scale;
  if (kQ8Block % lanes == 0) {
    std::memcpy(&scale, row + 4 * (index / kQ8Block), 4);
    return hn::Set(df, scale);
  }
  HWY_ALIGN float per_lane[kMaxLanesOf<float>];
  for (size_t i = 0; i < lanes; ++i) {
    std::memcpy(&per_lane[i], row + 4 * std::min((index + i) / kQ8Block, blocks - 1), 4);
  }
  return hn::Load(df, per_lane);
}

// `count` q8_0 elements from `index` (count <= Lanes; other lanes code 0):
// float(code) * scale, the product kv_load computes. `codes` is the byte
// offset of the codes in the row (4 * blocks).
HWY_INLINE VF LoadQ8(DF df, const unsigned char* HWY_RESTRICT row, size_t index, size_t codes,
                     size_t count) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di32;
  const auto* at = reinterpret_cast<const int8_t*>(row + codes + index);
  const auto q = count == hn::Lanes(df) ? hn::LoadU(d8, at) : LoadPadded(d8, at, count);
  return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di32, q)),
                 Q8LaneScales(df, row, index, codes / 4));
}

// Lanes(df) elements of a K/V row starting at `index`, widened to float.
// codes: q8_0's code offset in the row (unused by the other dtypes).
template <KvDtype kDtype>
HWY_INLINE VF LoadKv(DF df, const void* HWY_RESTRICT row, size_t index,
                     [[maybe_unused]] size_t codes) {
  if constexpr (kDtype == KvDtype::kF32) {
    return hn::LoadU(df, static_cast<const float*>(row) + index);
  } else if constexpr (kDtype == KvDtype::kQ8_0) {
    return LoadQ8(df, static_cast<const unsigned char*>(row), index, codes, hn::Lanes(df));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const auto bits = hn::LoadU(du16, static_cast<const uint16_t*>(row) + index);
    if constexpr (kDtype == KvDtype::kBF16) {
      const hn::RebindToUnsigned<DF> du32;
      return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, bits)));
    } else {
      return WidenF16(df, bits);
    }
  }
}

// As LoadKv for the last `count` (< Lanes) elements; the other lanes are +0
// (q8_0: code 0 times the block's scale).
template <KvDtype kDtype>
HWY_INLINE VF LoadKvPadded(DF df, const void* HWY_RESTRICT row, size_t index, size_t count,
                           [[maybe_unused]] size_t codes) {
  if constexpr (kDtype == KvDtype::kF32) {
    return LoadPadded(df, static_cast<const float*>(row) + index, count);
  } else if constexpr (kDtype == KvDtype::kQ8_0) {
    return LoadQ8(df, static_cast<const unsigned char*>(row), index, codes, count);
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const auto bits = LoadPadded(du16, static_cast<const uint16_t*>(row) + index, count);
    if constexpr (kDtype == KvDtype::kBF16) {
      const hn::RebindToUnsigned<DF> du32;
      return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, bits)));
    } else {
      return WidenF16(df, bits);
    }
  }
}

HWY_INLINE float SumLanes(DF df, VF v) {
  return hn::GetLane(hn::SumOfLanes(df, v));
}

// Highway's Exp returns 0 for NaN (its lower-bound select) and is only valid
// up to ~88.7; clamping above that keeps it overflowing to +inf like expf, and
// the select keeps NaN (a poisoned cache slot) visible. Exp and Tanh convert
// their argument to int32 before their own range selects, which is undefined
// for NaN and +-inf on the emulated targets, so NaN lanes compute on 0 and the
// argument is clamped to where those selects already give the final answer
// (Exp is 0 below -104, Tanh is +-1 beyond 18.71): no result bit changes.
HWY_INLINE VF ExpChecked(DF df, VF x) {
  const auto nan = hn::IsNaN(x);
  const VF in_range =
      hn::Min(hn::Max(hn::IfThenZeroElse(nan, x), hn::Set(df, -200.0f)), hn::Set(df, 90.0f));
  return hn::IfThenElse(nan, x, hn::Exp(df, in_range));
}

HWY_INLINE VF TanhChecked(DF df, VF x) {
  const auto nan = hn::IsNaN(x);
  const VF in_range =
      hn::Min(hn::Max(hn::IfThenZeroElse(nan, x), hn::Set(df, -20.0f)), hn::Set(df, 20.0f));
  return hn::IfThenElse(nan, x, hn::Tanh(df, in_range));
}

// ---------------------------------------------------------------------------
// matmul

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

// ---------------------------------------------------------------------------
// attend

// Key or value rows in key order, handed out in runs of rows that lie one
// stride apart: one run from a start (contiguous storage), or one per block
// of a block table (paged storage, block_rows rows per block). Only addresses
// differ, so both give the same bits for the same rows.
struct ContiguousRows {
  const unsigned char* at;
  size_t row_bytes;
  size_t codes;  // q8_0: byte offset of the codes in a row (LoadKv)
  // Up to `wanted` rows from the cursor: their start, and how many.
  HWY_INLINE size_t run(const unsigned char*& start, size_t wanted) {
    start = at;
    at += wanted * row_bytes;
    return wanted;
  }
};

struct BlockRows {
  const void* const* blocks;  // [blocks] start of each block's rows
  size_t block_rows, row_bytes;
  size_t codes;  // q8_0: byte offset of the codes in a row (LoadKv)
  size_t block = 0, offset = 0;
  HWY_INLINE size_t run(const unsigned char*& start, size_t wanted) {
    start = static_cast<const unsigned char*>(blocks[block]) + offset * row_bytes;
    const size_t n = std::min(block_rows - offset, wanted);
    // The next block lies elsewhere (often in another page, where the
    // hardware prefetcher stops): fetch all of it while this run is read.
    if (n < wanted) {
      const auto* next = static_cast<const unsigned char*>(blocks[block + 1]);
      for (size_t line = 0; line < block_rows * row_bytes; line += 64) hwy::Prefetch(next + line);
    }
    offset += n;
    if (offset == block_rows) offset = 0, ++block;
    return n;
  }
};

// A sliding-window layer's ring of ring_rows slots: key j's row is slot
// (first + j) % ring_rows, so a window that wraps is two runs.
struct RingRows {
  const unsigned char* base;
  size_t ring_rows, row_bytes;
  size_t codes;  // q8_0: byte offset of the codes in a row (LoadKv)
  size_t slot;   // the next key's slot
  HWY_INLINE size_t run(const unsigned char*& start, size_t wanted) {
    start = base + slot * row_bytes;
    const size_t n = std::min(ring_rows - slot, wanted);
    slot += n;
    if (slot == ring_rows) slot = 0;
    return n;
  }
};

// Scores of kHeads query heads against every key; each K row is loaded once
// for the kHeads heads. scores: [kHeads][n_keys] (row stride n_keys).
template <KvDtype kDtype, size_t kHeads, class Rows>
HWY_INLINE void AttendScores(const float* HWY_RESTRICT q, Rows k, size_t n_keys, size_t dim,
                             float scale, float* HWY_RESTRICT scores) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const size_t dim_full = dim - dim % lanes;
  VF q_tail[kHeads];
  KVCHECK_UNROLL_FULLY
  for (size_t h = 0; h < kHeads; ++h) {
    q_tail[h] = LoadPadded(df, q + h * dim + dim_full, dim - dim_full);
  }
  for (size_t j = 0; j < n_keys;) {
    const unsigned char* run_start;
    const size_t run_end = j + k.run(run_start, n_keys - j);
    for (; j < run_end; ++j, run_start += k.row_bytes) {
      const void* k_row = run_start;
      VF acc[kHeads];
      KVCHECK_UNROLL_FULLY
      for (size_t h = 0; h < kHeads; ++h) acc[h] = hn::Zero(df);
      for (size_t d = 0; d < dim_full; d += lanes) {
        const VF kv = LoadKv<kDtype>(df, k_row, d, k.codes);
        KVCHECK_UNROLL_FULLY
        for (size_t h = 0; h < kHeads; ++h) {
          acc[h] = hn::MulAdd(hn::LoadU(df, q + h * dim + d), kv, acc[h]);
        }
      }
      if (dim_full != dim) {
        const VF kv = LoadKvPadded<kDtype>(df, k_row, dim_full, dim - dim_full, k.codes);
        KVCHECK_UNROLL_FULLY
        for (size_t h = 0; h < kHeads; ++h) acc[h] = hn::MulAdd(q_tail[h], kv, acc[h]);
      }
      KVCHECK_UNROLL_FULLY
      for (size_t h = 0; h < kHeads; ++h) scores[h * n_keys + j] = SumLanes(df, acc[h]) * scale;
    }
  }
}

// In place: p[j] = exp(p[j] - max_j p) for j < n_keys; returns sum_j p[j],
// summed in whole vectors of keys anchored at key 0.  p: [n_keys], n_keys > 0.
HWY_INLINE float SoftmaxNumerators(float* HWY_RESTRICT p, size_t n_keys) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const size_t full = n_keys - n_keys % lanes;
  const VF neg_inf = hn::Set(df, -HUGE_VALF);
  VF max_v = neg_inf;
  for (size_t j = 0; j < full; j += lanes) max_v = hn::Max(max_v, hn::LoadU(df, p + j));
  if (full != n_keys) {
    const VF tail = LoadPadded(df, p + full, n_keys - full);
    max_v = hn::Max(max_v, hn::IfThenElse(hn::FirstN(df, n_keys - full), tail, neg_inf));
  }
  const VF max_score = hn::MaxOfLanes(df, max_v);

  VF sum = hn::Zero(df);
  for (size_t j = 0; j < full; j += lanes) {
    const VF e = ExpChecked(df, hn::Sub(hn::LoadU(df, p + j), max_score));
    hn::StoreU(e, df, p + j);
    sum = hn::Add(sum, e);
  }
  if (full != n_keys) {
    const size_t remaining = n_keys - full;
    const VF e = ExpChecked(df, hn::Sub(LoadPadded(df, p + full, remaining), max_score));
    StorePartial(df, e, p + full, remaining);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(df, remaining), e));
  }
  return SumLanes(df, sum);
}

// out[d] = (sum_j p[j] * v[j][d]) / sum for kChunks whole vectors of d from d0
// (or, with kPadded, for the last dim - d0 < Lanes elements). Each lane keeps
// an even-key and an odd-key chain, added at the end: a fixed structure that
// depends only on n_keys.
template <KvDtype kDtype, size_t kChunks, bool kPadded, class Rows>
HWY_INLINE void AttendValues(const float* HWY_RESTRICT p, Rows v, size_t n_keys, size_t d0,
                             size_t dim, float sum, float* HWY_RESTRICT out) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const size_t tail_count = dim - d0;
  const auto load = [&](const void* row, [[maybe_unused]] size_t c) HWY_ATTR {
    if constexpr (kPadded) {
      return LoadKvPadded<kDtype>(df, row, d0, tail_count, v.codes);
    } else {
      return LoadKv<kDtype>(df, row, d0 + c * lanes, v.codes);
    }
  };
  VF even[kChunks];
  VF odd[kChunks];
  KVCHECK_UNROLL_FULLY
  for (size_t c = 0; c < kChunks; ++c) even[c] = odd[c] = hn::Zero(df);
  // Key j goes to the even chain when j is even, else to the odd one, in
  // ascending order within each chain, however the runs fall.
  const auto add = [&](VF* chain, size_t key, const void* row) HWY_ATTR {
    const VF weight = hn::Set(df, p[key]);
    KVCHECK_UNROLL_FULLY
    for (size_t c = 0; c < kChunks; ++c) chain[c] = hn::MulAdd(weight, load(row, c), chain[c]);
  };
  for (size_t j = 0; j < n_keys;) {
    const unsigned char* row;
    const size_t run_end = j + v.run(row, n_keys - j);
    if (j % 2 == 1 && j < run_end) add(odd, j++, row), row += v.row_bytes;
    for (; j + 2 <= run_end; j += 2, row += 2 * v.row_bytes) {
      const VF p_even = hn::Set(df, p[j]);
      const VF p_odd = hn::Set(df, p[j + 1]);
      const void* row_even = row;
      const void* row_odd = row + v.row_bytes;
      KVCHECK_UNROLL_FULLY
      for (size_t c = 0; c < kChunks; ++c) {
        even[c] = hn::MulAdd(p_even, load(row_even, c), even[c]);
        odd[c] = hn::MulAdd(p_odd, load(row_odd, c), odd[c]);
      }
    }
    if (j < run_end) add(even, j++, row);
  }
  const VF sum_v = hn::Set(df, sum);
  KVCHECK_UNROLL_FULLY
  for (size_t c = 0; c < kChunks; ++c) {
    const VF result = hn::Div(hn::Add(even[c], odd[c]), sum_v);
    if constexpr (kPadded) {
      StorePartial(df, result, out + d0, tail_count);
    } else {
      hn::StoreU(result, df, out + d0 + c * lanes);
    }
  }
}

// k_rows, v_rows: fresh cursors at key 0 (each pass copies them).
template <KvDtype kDtype, class Rows>
void AttendTyped(const float* HWY_RESTRICT q, size_t group, Rows k_rows, Rows v_rows, size_t n_keys,
                 size_t dim, float scale, float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  if (n_keys == 0) {
    std::fill(out, out + group * dim, 0.0f);
    return;
  }
  for (size_t g = 0; g < group; g += 4) {
    const float* q_block = q + g * dim;
    float* s_block = scores + g * n_keys;
    switch (std::min<size_t>(4, group - g)) {
      case 4:
        AttendScores<kDtype, 4>(q_block, k_rows, n_keys, dim, scale, s_block);
        break;
      case 3:
        AttendScores<kDtype, 3>(q_block, k_rows, n_keys, dim, scale, s_block);
        break;
      case 2:
        AttendScores<kDtype, 2>(q_block, k_rows, n_keys, dim, scale, s_block);
        break;
      default:
        AttendScores<kDtype, 1>(q_block, k_rows, n_keys, dim, scale, s_block);
        break;
    }
  }
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const size_t dim_full = dim - dim % lanes;
  for (size_t g = 0; g < group; ++g) {
    float* p = scores + g * n_keys;
    float* out_head = out + g * dim;
    const float sum = SoftmaxNumerators(p, n_keys);
    size_t d = 0;
    for (; d + 4 * lanes <= dim_full; d += 4 * lanes) {
      AttendValues<kDtype, 4, false>(p, v_rows, n_keys, d, dim, sum, out_head);
    }
    switch ((dim_full - d) / lanes) {
      case 3:
        AttendValues<kDtype, 3, false>(p, v_rows, n_keys, d, dim, sum, out_head);
        break;
      case 2:
        AttendValues<kDtype, 2, false>(p, v_rows, n_keys, d, dim, sum, out_head);
        break;
      case 1:
        AttendValues<kDtype, 1, false>(p, v_rows, n_keys, d, dim, sum, out_head);
        break;
      default:
        break;
    }
    if (dim_full != dim) {
      AttendValues<kDtype, 1, true>(p, v_rows, n_keys, dim_full, dim, sum, out_head);
    }
  }
}

template <class Rows>
void AttendRows(const float* q, size_t group, Rows k, Rows v, KvDtype dtype, size_t n_keys,
                size_t dim, float scale, float* scores, float* out) {
  switch (dtype) {
    case KvDtype::kF32:
      return AttendTyped<KvDtype::kF32>(q, group, k, v, n_keys, dim, scale, scores, out);
    case KvDtype::kBF16:
      return AttendTyped<KvDtype::kBF16>(q, group, k, v, n_keys, dim, scale, scores, out);
    case KvDtype::kF16:
      return AttendTyped<KvDtype::kF16>(q, group, k, v, n_keys, dim, scale, scores, out);
    case KvDtype::kQ8_0:
      return AttendTyped<KvDtype::kQ8_0>(q, group, k, v, n_keys, dim, scale, scores, out);
    case KvDtype::kQ4_0:  // not in the CPU engine's traits: never stored (kv_dtype.h)
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      return;
  }
}

// q8_0's code offset in a stored row of kv_stride elements.
inline size_t Q8Codes(KvDtype dtype, size_t kv_stride) {
  return dtype == KvDtype::kQ8_0 ? 4 * q8_blocks(kv_stride) : 0;
}

// q: [group][dim];  k, v: [n_keys] rows of `dtype`, kv_row_bytes(dtype,
// kv_stride) apart;  scores: [group][n_keys];  out: [group][dim]
void AttendSimd(const float* q, size_t group, const void* k, const void* v, KvDtype dtype,
                size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores,
                float* out) {
  const size_t row_bytes = kv_row_bytes(dtype, kv_stride), codes = Q8Codes(dtype, kv_stride);
  AttendRows(q, group, ContiguousRows{static_cast<const unsigned char*>(k), row_bytes, codes},
             ContiguousRows{static_cast<const unsigned char*>(v), row_bytes, codes}, dtype, n_keys,
             dim, scale, scores, out);
}

// As AttendSimd, with key j in slot (first_slot + j) % ring_rows of a ring.
void AttendRingSimd(const float* q, size_t group, const void* k, const void* v, size_t ring_rows,
                    size_t first_slot, KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim,
                    float scale, float* scores, float* out) {
  const size_t row_bytes = kv_row_bytes(dtype, kv_stride), codes = Q8Codes(dtype, kv_stride);
  AttendRows(
      q, group,
      RingRows{static_cast<const unsigned char*>(k), ring_rows, row_bytes, codes, first_slot},
      RingRows{static_cast<const unsigned char*>(v), ring_rows, row_bytes, codes, first_slot},
      dtype, n_keys, dim, scale, scores, out);
}

// As AttendSimd, with key j in block j / block_rows of k_blocks / v_blocks.
void AttendPagedSimd(const float* q, size_t group, const void* const* k_blocks,
                     const void* const* v_blocks, size_t block_rows, KvDtype dtype,
                     size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores,
                     float* out) {
  const size_t row_bytes = kv_row_bytes(dtype, kv_stride), codes = Q8Codes(dtype, kv_stride);
  AttendRows(q, group, BlockRows{k_blocks, block_rows, row_bytes, codes},
             BlockRows{v_blocks, block_rows, row_bytes, codes}, dtype, n_keys, dim, scale, scores,
             out);
}

// ---------------------------------------------------------------------------
// Norms

// sum_i f(x[i]) for i < width in whole vectors anchored at 0; the remainder's
// padding lanes are zeroed after f so they add nothing.
template <class Transform>
HWY_INLINE float SumOverRow(const float* HWY_RESTRICT x, size_t width, Transform f) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  VF sum = hn::Zero(df);
  size_t i = 0;
  for (; i + lanes <= width; i += lanes) sum = f(hn::LoadU(df, x + i), sum);
  if (i != width) {
    const VF term = f(LoadPadded(df, x + i, width - i), hn::Zero(df));
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(df, width - i), term));
  }
  return SumLanes(df, sum);
}

// Applies f to every element; the remainder goes through a padded copy so
// each element sees the same instructions wherever it sits.  x, y: [n]
template <class Map>
HWY_INLINE void MapRow(const float* x, size_t n, float* y, Map f) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(hn::LoadU(df, x + i), i), df, y + i);
  if (i != n) StorePartial(df, f(LoadPadded(df, x + i, n - i), i), y + i, n - i);
}

// Per-element operands at the offset MapRow is working on (padded at the end).
HWY_INLINE VF LoadAt(DF df, const float* HWY_RESTRICT p, size_t i, size_t n) {
  return i + hn::Lanes(df) <= n ? hn::LoadU(df, p + i) : LoadPadded(df, p + i, n - i);
}

// x, y: [width];  gain, bias: [width] (bias may be nullptr)
void LayerNormSimd(const float* x, const float* gain, const float* bias, size_t width, float eps,
                   float* y) {
  if (width == 0) return;
  const DF df;
  const float mean = SumOverRow(x, width, [](VF v, VF sum) HWY_ATTR { return hn::Add(sum, v); }) /
                     static_cast<float>(width);
  const VF mean_v = hn::Set(df, mean);
  const float sum_sq = SumOverRow(x, width, [&](VF v, VF sum) HWY_ATTR {
    const VF centered = hn::Sub(v, mean_v);
    return hn::MulAdd(centered, centered, sum);
  });
  const VF inv_std = hn::Set(df, 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + eps));
  MapRow(x, width, y, [&](VF v, size_t i) HWY_ATTR {
    const VF scaled = hn::Mul(hn::Mul(hn::Sub(v, mean_v), inv_std), LoadAt(df, gain, i, width));
    return bias != nullptr ? hn::Add(scaled, LoadAt(df, bias, i, width)) : scaled;
  });
}

// x, y: [width];  gain: [width]
void RmsNormSimd(const float* x, const float* gain, size_t width, float eps, float* y) {
  if (width == 0) return;
  const DF df;
  const float sum_sq =
      SumOverRow(x, width, [](VF v, VF sum) HWY_ATTR { return hn::MulAdd(v, v, sum); });
  const VF inv_rms = hn::Set(df, 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + eps));
  MapRow(x, width, y, [&](VF v, size_t i) HWY_ATTR {
    return hn::Mul(hn::Mul(v, inv_rms), LoadAt(df, gain, i, width));
  });
}

// ---------------------------------------------------------------------------
// Elementwise

// x: [n]; the rounding steps match scalar::gelu_tanh one for one.
void GeluTanhSimd(float* x, size_t n) {
  const DF df;
  const VF cubic = hn::Set(df, 0.044715f);
  const VF sqrt_2_over_pi = hn::Set(df, 0.7978845608028654f);
  const VF one = hn::Set(df, 1.0f);
  const VF half = hn::Set(df, 0.5f);
  MapRow(x, n, x, [&](VF v, size_t) HWY_ATTR {
    const VF inner = hn::Mul(hn::Add(hn::Mul(hn::Mul(hn::Mul(v, v), v), cubic), v), sqrt_2_over_pi);
    return hn::Mul(hn::Mul(hn::Add(TanhChecked(df, inner), one), v), half);
  });
}

// gate, up: [n]
void SiluMulSimd(float* gate, const float* up, size_t n) {
  const DF df;
  const VF one = hn::Set(df, 1.0f);
  MapRow(gate, n, gate, [&](VF g, size_t i) HWY_ATTR {
    const VF silu = hn::Div(g, hn::Add(ExpChecked(df, hn::Neg(g)), one));
    return hn::Mul(silu, LoadAt(df, up, i, n));
  });
}

// y, x: [n]. Addition rounds the same in any lane width, so a scalar tail
// gives the same bits as a padded vector would.
void AddInplaceSimd(float* y, const float* x, size_t n) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, x + i)), df, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

// x: [n]
void ExpInplaceSimd(float* x, size_t n) {
  const DF df;
  MapRow(x, n, x, [&](VF v, size_t) HWY_ATTR { return ExpChecked(df, v); });
}

// x: [n]
void TanhInplaceSimd(float* x, size_t n) {
  const DF df;
  MapRow(x, n, x, [&](VF v, size_t) HWY_ATTR { return TanhChecked(df, v); });
}

const char* SimdTargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace kvcheck::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVCHECK_ENGINE_CPU_KERNELS_INL_H_
