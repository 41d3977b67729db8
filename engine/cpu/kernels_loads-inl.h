// Loads, widening and checked transcendentals shared by every SIMD kernel
// (kernels-inl.h states the invariance contract they keep). Compiled once per
// Highway target through kernels.cc.

#if defined(KVCHECK_ENGINE_CPU_KERNELS_LOADS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_LOADS_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_LOADS_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_LOADS_INL_H_
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

}  // namespace kvcheck::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVCHECK_ENGINE_CPU_KERNELS_LOADS_INL_H_
