// The probes' one dynamic-dispatch point (see engine/cpu/kernels.cc):
// foreach_target.h re-includes this file once per Highway target, and the
// functions under HWY_ONCE call the best target this CPU supports.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/probes.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvcheck::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 16 chains cover latency 4 x 2 pipes (x86 cores from Haswell to Zen 5) twice
// over and, with the two constants, fit AVX3's 32 registers; AVX2 and SSE
// have 16, so 12 chains there keep every accumulator in a register.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
constexpr int kChains = 12;
#else
constexpr int kChains = 16;
#endif

double FmaChains(size_t steps) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  V acc[kChains];
  for (int a = 0; a < kChains; ++a) acc[a] = hn::Set(df, 1.0f + 0.001f * float(a));
  const V mul = hn::Set(df, 0.999999f), add = hn::Set(df, 1e-7f);
  for (size_t s = 0; s < steps; ++s) {
    HWY_UNROLL(16)
    for (int a = 0; a < kChains; ++a) acc[a] = hn::MulAdd(acc[a], mul, add);
  }
  V sum = acc[0];
  for (int a = 1; a < kChains; ++a) sum = hn::Add(sum, acc[a]);
  volatile float sink = hn::GetLane(sum);
  (void)sink;
  return 2.0 * kChains * double(steps) * double(hn::Lanes(df));
}

float SumFloats(const float* HWY_RESTRICT data, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(df, data + i));
    a1 = hn::Add(a1, hn::LoadU(df, data + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(df, data + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(df, data + i + 3 * lanes));
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) sum += data[i];
  return sum;
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace kvcheck::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <chrono>
#include <ctime>

#include "bench/probes.h"
#include "hwy/aligned_allocator.h"

namespace kvcheck::bench {

HWY_EXPORT(FmaChains);
HWY_EXPORT(SumFloats);
HWY_EXPORT(TargetName);

double fma_chains(size_t steps) {
  return HWY_DYNAMIC_DISPATCH(FmaChains)(steps);
}

float sum_floats(const float* data, size_t n) {
  return HWY_DYNAMIC_DISPATCH(SumFloats)(data, n);
}

const char* probe_target_name() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

}  // namespace

double stream_read_gbps(int trials) {
  const size_t n = size_t{256} << 18;          // floats in 256 MiB
  auto data = hwy::AllocateAligned<float>(n);  // [n]
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  double best = 0;
  for (int t = 0; t < trials; ++t) {
    const auto begin = std::chrono::steady_clock::now();
    volatile float sink = sum_floats(data.get(), n);
    (void)sink;
    if (double gbps = double(n) * sizeof(float) * 1e-9 / seconds_since(begin); gbps > best) {
      best = gbps;
    }
  }
  return best;
}

double fma_peak_gflops(int trials) {
  double best = 0;
  for (int t = 0; t < trials; ++t) {
    const auto begin = std::chrono::steady_clock::now();
    const double flops = fma_chains(size_t{1} << 20);
    if (double g = flops * 1e-9 / seconds_since(begin); g > best) best = g;
  }
  return best;
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace kvcheck::bench
#endif  // HWY_ONCE
