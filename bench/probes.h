// Roofline probes measured inside the same benchmark run as the code they
// judge, so a ratio compares two numbers taken under the same load. Compiled
// for the host (-march=native) so the probe uses the widest vectors the
// engine's dynamic dispatch reaches.
#pragma once

#include <chrono>
#include <cstddef>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

namespace kvcheck::bench {

namespace hn = hwy::HWY_NAMESPACE;

// Best of `trials` sums of a 256 MiB array (far above the LLC) with four
// vector accumulators: the DRAM streaming-read bandwidth of one thread, GB/s.
inline double stream_read_gbps(int trials = 5) {
  const size_t n = size_t{256} << 18;  // floats in 256 MiB
  auto data = hwy::AllocateAligned<float>(n);
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  double best = 0;
  for (int t = 0; t < trials; ++t) {
    const auto begin = std::chrono::steady_clock::now();
    auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 4 * lanes) {
      a0 = hn::Add(a0, hn::Load(df, data.get() + i));
      a1 = hn::Add(a1, hn::Load(df, data.get() + i + lanes));
      a2 = hn::Add(a2, hn::Load(df, data.get() + i + 2 * lanes));
      a3 = hn::Add(a3, hn::Load(df, data.get() + i + 3 * lanes));
    }
    volatile float sink = hn::GetLane(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
    (void)sink;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (double gbps = double(n) * sizeof(float) * 1e-9 / s; gbps > best) best = gbps;
  }
  return best;
}

// Best of `trials` runs of 16 independent FMA chains (covers latency x pipes):
// the single-thread f32 FMA peak, GFLOP/s.
inline double fma_peak_gflops(int trials = 5) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  constexpr int kChains = 16, kSteps = 1 << 20;
  double best = 0;
  for (int t = 0; t < trials; ++t) {
    V acc[kChains];
    for (int a = 0; a < kChains; ++a) acc[a] = hn::Set(df, 1.0f + 0.001f * a);
    const V mul = hn::Set(df, 0.999999f), add = hn::Set(df, 1e-7f);
    const auto begin = std::chrono::steady_clock::now();
    for (int s = 0; s < kSteps; ++s) {
      HWY_UNROLL(16)
      for (int a = 0; a < kChains; ++a) acc[a] = hn::MulAdd(acc[a], mul, add);
    }
    float sum = 0;
    for (int a = 0; a < kChains; ++a) sum += hn::GetLane(acc[a]);
    volatile float sink = sum;
    (void)sink;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    const double flops = 2.0 * kChains * kSteps * double(hn::Lanes(df));
    if (double g = flops * 1e-9 / s; g > best) best = g;
  }
  return best;
}

}  // namespace kvcheck::bench
