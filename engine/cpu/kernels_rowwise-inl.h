// Row-wise kernels: norms and elementwise activations, whose tails run
// through the same vector code as their bodies (kernels-inl.h, third rule).

#if defined(KVCHECK_ENGINE_CPU_KERNELS_ROWWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_ROWWISE_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_ROWWISE_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_ROWWISE_INL_H_
#endif

#include <cstddef>

#include "engine/cpu/kernels_loads-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvcheck::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

#endif  // KVCHECK_ENGINE_CPU_KERNELS_ROWWISE_INL_H_
