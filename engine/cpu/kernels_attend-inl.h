// Attention over stored K/V rows of any dtype and layout (contiguous, ring,
// paged): scores, softmax and the weighted sum of values, each anchored at key
// 0 (kernels-inl.h, second rule of the contract).

#if defined(KVCHECK_ENGINE_CPU_KERNELS_ATTEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_ATTEND_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_ATTEND_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_ATTEND_INL_H_
#endif

#include <cstddef>

#include "engine/cpu/kernels_loads-inl.h"
#include "engine/kv_dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvcheck::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace kvcheck::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVCHECK_ENGINE_CPU_KERNELS_ATTEND_INL_H_
