// Kernel benchmarks: matmul (matvec and prefill shapes) and attention, scalar
// vs SIMD vs Eigen side by side, with the machine's measured FMA peak and
// streaming-read bandwidth in the same run so every figure is a ratio to a
// roofline measured under the same conditions. docs/KERNELS.md quotes them.
// The kernels and the probes dispatch at run time; Eigen is compiled for
// KVCHECK_BENCH_MARCH (bench/eigen_gemm.cpp) and skipped on a CPU without it.
//
//   build/<dir>/bench/kernels_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/eigen_gemm.h"
#include "bench/probes.h"
#include "engine/cpu/kernels.h"
#include "hwy/aligned_allocator.h"

namespace {

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

void BM_FmaPeak(benchmark::State& state) {
  constexpr size_t kSteps = 4096;
  double flops = 0;
  for (auto _ : state) flops = kvcheck::bench::fma_chains(kSteps);
  set_rate(state, "GFLOP/s", flops * 1e-9);
  state.SetLabel(kvcheck::bench::probe_target_name());
}
BENCHMARK(BM_FmaPeak);

// Sum of n floats (bench/probes.h) as a read bandwidth, GB/s.
void BM_Read(benchmark::State& state, size_t n) {
  auto data = hwy::AllocateAligned<float>(n);  // [n]
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  for (auto _ : state) benchmark::DoNotOptimize(kvcheck::bench::sum_floats(data.get(), n));
  set_rate(state, "GB/s", double(n) * sizeof(float) * 1e-9);
}

// 256 MiB (>> 32 MiB LLC): the DRAM streaming-read bandwidth one thread can reach.
void BM_StreamRead(benchmark::State& state) {
  BM_Read(state, size_t{256} << 18);
}
BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond);

// 4 MiB (L3-resident, like GPT-2-small weight matrices).
void BM_L3Read(benchmark::State& state) {
  BM_Read(state, size_t{1} << 20);
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

#if defined(__x86_64__) || defined(__i386__)
// Whether this CPU has an extension, by its __builtin_cpu_supports name (the
// builtin takes only literals, hence the table; eigen_gemm.cpp lists the same).
bool cpu_supports(std::string_view name) {
  __builtin_cpu_init();
  const std::pair<std::string_view, bool> known[] = {
      {"sse3", __builtin_cpu_supports("sse3")},
      {"ssse3", __builtin_cpu_supports("ssse3")},
      {"sse4.1", __builtin_cpu_supports("sse4.1")},
      {"sse4.2", __builtin_cpu_supports("sse4.2")},
      {"popcnt", __builtin_cpu_supports("popcnt")},
      {"sse4a", __builtin_cpu_supports("sse4a")},
      {"aes", __builtin_cpu_supports("aes")},
      {"pclmul", __builtin_cpu_supports("pclmul")},
      {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},
      {"bmi", __builtin_cpu_supports("bmi")},
      {"bmi2", __builtin_cpu_supports("bmi2")},
      {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512cd", __builtin_cpu_supports("avx512cd")},
      {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")},
      {"avx512ifma", __builtin_cpu_supports("avx512ifma")},
      {"avx512vbmi", __builtin_cpu_supports("avx512vbmi")},
      {"avx512vbmi2", __builtin_cpu_supports("avx512vbmi2")},
      {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bitalg", __builtin_cpu_supports("avx512bitalg")},
      {"avx512vpopcntdq", __builtin_cpu_supports("avx512vpopcntdq")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
      {"fma4", __builtin_cpu_supports("fma4")},
      {"xop", __builtin_cpu_supports("xop")},
      {"gfni", __builtin_cpu_supports("gfni")},
      {"vpclmulqdq", __builtin_cpu_supports("vpclmulqdq")},
      {"avx512er", __builtin_cpu_supports("avx512er")},
      {"avx512pf", __builtin_cpu_supports("avx512pf")},
      {"avx5124vnniw", __builtin_cpu_supports("avx5124vnniw")},
      {"avx5124fmaps", __builtin_cpu_supports("avx5124fmaps")},
      {"avx512vp2intersect", __builtin_cpu_supports("avx512vp2intersect")},
  };
  for (const auto& [known_name, supported] : known) {
    if (known_name == name) return supported;
  }
  return false;
}
#else
bool cpu_supports(std::string_view) {
  return false;
}
#endif

// The first extension Eigen was compiled for that this CPU lacks, or null.
const char* eigen_isa_missing() {
  for (const char* const* isa = kvcheck::bench::kEigenGemmIsa; *isa; ++isa) {
    if (!cpu_supports(*isa)) return *isa;
  }
  return nullptr;
}

// Eigen's general GEMM on the same row-major layouts: y = x * w^T + bias.
void BM_MatmulEigen(benchmark::State& state) {
  if (const char* missing = eigen_isa_missing()) {
    state.SkipWithError((std::string("Eigen was compiled for KVCHECK_BENCH_MARCH=") +
                         kvcheck::bench::kEigenGemmMarch + ", which uses " + missing +
                         "; this CPU lacks it")
                            .c_str());
    return;
  }
  const long rows = long(state.range(0)), in = long(state.range(1)), out = long(state.range(2));
  const auto x = filled(size_t(rows * in), 1.0f), w = filled(size_t(out * in), 2.0f);
  const auto bias = filled(size_t(out), 3.0f);
  std::vector<float> y(size_t(rows * out));  // [rows][out]
  for (auto _ : state) {
    kvcheck::bench::eigen_matmul(x.data(), rows, w.data(), bias.data(), in, out, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, "GFLOP/s", 2.0 * double(rows * in * out) * 1e-9);
  set_rate(state, "GB/s", double(out * in) * sizeof(float) * 1e-9);
  const std::string_view march = kvcheck::bench::kEigenGemmMarch;
  state.SetLabel(march.empty() ? "compiler's default ISA" : "-march=" + std::string(march));
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
  // One stored row per key (q8_0: its scales, then its codes).
  const size_t row_bytes = kvcheck::kv_row_bytes(dtype, dim);
  std::vector<unsigned char> k(n_keys * row_bytes), v(n_keys * row_bytes);
  for (size_t j = 0; j < n_keys; ++j) {
    kvcheck::kv_store_row(k_f32.data() + j * dim, dtype, dim, k.data() + j * row_bytes);
    kvcheck::kv_store_row(v_f32.data() + j * dim, dtype, dim, v.data() + j * row_bytes);
  }
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
  set_rate(state, "GB/s", 2.0 * double(n_keys * row_bytes) * 1e-9);  // K and V read
  state.counters["KV_bytes"] = 2.0 * double(n_keys * row_bytes);
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
