// Kernel benchmarks: matmul (matvec and prefill shapes) and attention, scalar
// vs SIMD vs Eigen side by side, with the machine's measured FMA peak and
// streaming-read bandwidth in the same run so every figure is a ratio to a
// roofline measured under the same conditions. docs/KERNELS.md quotes them.
//
//   build/<dir>/bench/kernels_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/kernels.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

namespace {

namespace hn = hwy::HWY_NAMESPACE;
using kvcheck::KvDtype;
using kvcheck::cpu::KernelPath;

std::vector<float> filled(size_t n, float seed) {
  std::vector<float> v(n);
  uint32_t state = static_cast<uint32_t>(seed * 1000.0f) + 1u;
  for (float& f : v) {
    state = state * 1664525u + 1013904223u;
    f = static_cast<float>(state >> 8) * 0x1p-24f - 0.5f;
  }
  return v;
}

void set_rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// --- Rooflines ---------------------------------------------------------------

// Enough independent accumulators (16 vectors) to cover FMA latency times the
// number of FMA pipes, on the widest vectors this binary is compiled for.
void BM_FmaPeak(benchmark::State& state) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  constexpr int kAccumulators = 16;
  constexpr int kSteps = 4096;
  V acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = hn::Set(df, 1.0f + 0.001f * a);
  const V mul = hn::Set(df, 0.999999f), add = hn::Set(df, 1e-7f);
  for (auto _ : state) {
    for (int s = 0; s < kSteps; ++s) {
      HWY_UNROLL(16)
      for (int a = 0; a < kAccumulators; ++a) acc[a] = hn::MulAdd(acc[a], mul, add);
    }
    for (int a = 0; a < kAccumulators; ++a) benchmark::DoNotOptimize(acc[a]);
  }
  set_rate(state, "GFLOP/s", 2.0 * kAccumulators * kSteps * hn::Lanes(df) * 1e-9);
  state.SetLabel(hwy::TargetName(HWY_TARGET));
}
BENCHMARK(BM_FmaPeak);

// Sum of a 256 MiB array (>> 32 MiB LLC) with several vector accumulators: the
// DRAM streaming-read bandwidth one thread can reach.
void BM_StreamRead(benchmark::State& state) {
  const size_t n = size_t{256} << 18;  // floats in 256 MiB
  auto data = hwy::AllocateAligned<float>(n);
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  for (auto _ : state) {
    auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 4 * lanes) {
      a0 = hn::Add(a0, hn::Load(df, data.get() + i));
      a1 = hn::Add(a1, hn::Load(df, data.get() + i + lanes));
      a2 = hn::Add(a2, hn::Load(df, data.get() + i + 2 * lanes));
      a3 = hn::Add(a3, hn::Load(df, data.get() + i + 3 * lanes));
    }
    benchmark::DoNotOptimize(hn::GetLane(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  }
  set_rate(state, "GB/s", double(n) * sizeof(float) * 1e-9);
}
BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond);

// Same idea over 4 MiB (L3-resident, like GPT-2-small weight matrices).
void BM_L3Read(benchmark::State& state) {
  const size_t n = size_t{1} << 20;
  auto data = hwy::AllocateAligned<float>(n);
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  for (auto _ : state) {
    auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 4 * lanes) {
      a0 = hn::Add(a0, hn::Load(df, data.get() + i));
      a1 = hn::Add(a1, hn::Load(df, data.get() + i + lanes));
      a2 = hn::Add(a2, hn::Load(df, data.get() + i + 2 * lanes));
      a3 = hn::Add(a3, hn::Load(df, data.get() + i + 3 * lanes));
    }
    benchmark::DoNotOptimize(hn::GetLane(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  }
  set_rate(state, "GB/s", double(n) * sizeof(float) * 1e-9);
}
BENCHMARK(BM_L3Read);

// --- matmul ------------------------------------------------------------------

// args: rows, in, out.
template <KernelPath kPath>
void BM_Matmul(benchmark::State& state) {
  const size_t rows = size_t(state.range(0)), in = size_t(state.range(1)),
               out = size_t(state.range(2));
  const auto x = filled(rows * in, 1.0f), w = filled(out * in, 2.0f), bias = filled(out, 3.0f);
  std::vector<float> y(rows * out);
  for (auto _ : state) {
    kvcheck::cpu::matmul(kPath, x.data(), rows, w.data(), bias.data(), in, out, 0, out, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, "GFLOP/s", 2.0 * double(rows * in * out) * 1e-9);
  set_rate(state, "GB/s", double(out * in) * sizeof(float) * 1e-9);  // weight stream
  if (kPath == KernelPath::kSimd) state.SetLabel(kvcheck::cpu::simd_target_name());
}

// Eigen's general GEMM on the same row-major layouts: y = x * w^T + bias.
void BM_MatmulEigen(benchmark::State& state) {
  const Eigen::Index rows = state.range(0), in = state.range(1), out = state.range(2);
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto x_data = filled(size_t(rows * in), 1.0f), w_data = filled(size_t(out * in), 2.0f);
  const auto bias_data = filled(size_t(out), 3.0f);
  std::vector<float> y_data(size_t(rows * out));
  Eigen::Map<const RowMajor> x(x_data.data(), rows, in), w(w_data.data(), out, in);
  Eigen::Map<const Eigen::RowVectorXf> bias(bias_data.data(), out);
  Eigen::Map<RowMajor> y(y_data.data(), rows, out);
  Eigen::setNbThreads(1);
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    y.rowwise() += bias;
    benchmark::DoNotOptimize(y_data.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, "GFLOP/s", 2.0 * double(rows * in * out) * 1e-9);
  set_rate(state, "GB/s", double(out * in) * sizeof(float) * 1e-9);
}

void MatvecShapes(benchmark::internal::Benchmark* b) {
  for (auto [in, out] :
       {std::pair{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, std::pair{4096, 8192}}) {
    b->Args({1, in, out});
  }
}
void PrefillShapes(benchmark::internal::Benchmark* b) {
  for (int rows : {128, 512}) {
    for (auto [in, out] : {std::pair{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}}) {
      b->Args({rows, in, out});
    }
  }
}
BENCHMARK(BM_Matmul<KernelPath::kScalar>)->Apply(MatvecShapes);
BENCHMARK(BM_Matmul<KernelPath::kSimd>)->Apply(MatvecShapes);
BENCHMARK(BM_MatmulEigen)->Apply(MatvecShapes);
// The scalar path is ~100x slower; one prefill shape shows the ratio.
BENCHMARK(BM_Matmul<KernelPath::kScalar>)->Args({128, 768, 768})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul<KernelPath::kSimd>)->Apply(PrefillShapes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulEigen)->Apply(PrefillShapes)->Unit(benchmark::kMillisecond);

// --- attend ------------------------------------------------------------------

// args: n_keys, group, dtype; dim 64, one query position.
template <KernelPath kPath>
void BM_Attend(benchmark::State& state) {
  const size_t n_keys = size_t(state.range(0)), group = size_t(state.range(1)), dim = 64;
  const auto dtype = static_cast<KvDtype>(state.range(2));
  const auto q = filled(group * dim, 1.0f);
  const auto k_f32 = filled(n_keys * dim, 2.0f), v_f32 = filled(n_keys * dim, 3.0f);
  const size_t bytes = size_t(kvcheck::kv_dtype_bytes(dtype));
  std::vector<unsigned char> k(n_keys * dim * bytes), v(n_keys * dim * bytes);
  kvcheck::cpu::kv_store(k_f32.data(), dtype, k.data(), n_keys * dim);
  kvcheck::cpu::kv_store(v_f32.data(), dtype, v.data(), n_keys * dim);
  std::vector<float> scores(kvcheck::cpu::attend_scratch_floats(group, n_keys)), out(group * dim);
  const float scale = 1.0f / std::sqrt(float(dim));
  for (auto _ : state) {
    kvcheck::cpu::attend(kPath, q.data(), group, k.data(), v.data(), dtype, dim, n_keys, dim, scale,
                         scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Two multiply-adds per (head, key, dim): q.k and p*v.
  set_rate(state, "GFLOP/s", 4.0 * double(group * n_keys * dim) * 1e-9);
  set_rate(state, "GB/s", 2.0 * double(n_keys * dim * bytes) * 1e-9);  // K and V read
  state.SetLabel(kvcheck::kv_dtype_name(dtype));
}
void AttendShapes(benchmark::internal::Benchmark* b) {
  for (int dtype : {int(KvDtype::kF32), int(KvDtype::kBF16)}) {
    for (int group : {1, 4}) {
      for (int n_keys : {128, 512, 2048}) b->Args({n_keys, group, dtype});
    }
  }
}
BENCHMARK(BM_Attend<KernelPath::kScalar>)->Apply(AttendShapes);
BENCHMARK(BM_Attend<KernelPath::kSimd>)->Apply(AttendShapes);

}  // namespace

BENCHMARK_MAIN();
