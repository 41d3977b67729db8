// GPU benchmarks (Google Benchmark), run by ci/gpu on a lent H200:
//  - the decode attention kernel (split + combine) on many sequences at
//    contexts 4k-32k: bytes of K and V read per second, as a fraction of the
//    H200's 4.8 TB/s HBM3e bandwidth (target >= 0.70); and at context 2048,
//    contiguous next to paged storage (blocks of 16 in shuffled order, read
//    through block tables), the "paged within 10 %" comparison;
//  - decode step latency and prefill throughput of the whole engine on the
//    GPT-2-small shape (12 layers, d_model 768, 12 heads of 64, d_ff 3072),
//    the CUDA engine next to the CPU engine (all cores) in the same run.
// Device time comes from CUDA events around the launches; engine calls are
// timed on the host (each ends with a synchronizing copy of the logits).
// docs/PERFORMANCE.md records the figures after a GPU run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/cpu/cpu_engine.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "model/rng.h"

namespace {

using namespace kvcheck;

constexpr double kH200BytesPerSecond = 4.8e12;

struct AttentionShape {
  const char* name;
  int n_heads, n_kv_heads, head_dim;
  KvDtype dtype;
};

constexpr AttentionShape kShapes[] = {
    {"gpt2_mha_d64_f32", 12, 12, 64, KvDtype::kF32},
    {"llama_gqa8_d128_f32", 32, 8, 128, KvDtype::kF32},
    {"llama_gqa8_d128_bf16", 32, 8, 128, KvDtype::kBF16},
};

// One decode query per sequence at the end of a full context: every
// sequence's K and V (ctx slots) are read once. range(2) = B > 0: paged
// storage, blocks of B slots handed out in a shuffled order.
void BM_DecodeAttention(benchmark::State& state) {
  const AttentionShape& shape = kShapes[state.range(0)];
  const int ctx = int(state.range(1)), B = int(state.range(2));
  const size_t elem = size_t(kv_dtype_bytes(shape.dtype));
  const size_t per_sequence = 2ull * ctx * shape.n_kv_heads * shape.head_dim * elem;
  // About 4 GiB of K and V: many sequences, far beyond the 50 MB L2.
  const int sequences = int(std::clamp<size_t>((size_t(4) << 30) / per_sequence, 8, 1024));
  const int blocks_per_sequence = B > 0 ? ctx / B : 1;
  cuda::KvCacheView cache;
  cache.dtype = shape.dtype;
  cache.rows = sequences * blocks_per_sequence;  // units
  cache.n_kv_heads = shape.n_kv_heads;
  cache.capacity = B > 0 ? B : ctx;  // slots per unit
  cache.head_dim = shape.head_dim;
  const size_t block = per_sequence / 2 * sequences;
  cuda::DeviceBuffer k(block, "bench K"), v(block, "bench V");
  // 0x3C bytes: a small finite value in f32 (0.0115) and in bf16 (0.0115).
  KVCHECK_CUDA_CHECK(cudaMemset(k.get(), 0x3C, block));
  KVCHECK_CUDA_CHECK(cudaMemset(v.get(), 0x3C, block));
  cache.k = k.get(), cache.v = v.get();

  const int qkv_stride = (shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim;
  cuda::DeviceBuffer qkv(size_t(sequences) * qkv_stride * sizeof(float), "bench qkv");
  KVCHECK_CUDA_CHECK(cudaMemset(qkv.get(), 0x3C, qkv.bytes()));
  std::vector<cuda::TokenSlot> plan;
  for (int s = 0; s < sequences; ++s) plan.push_back({s, ctx - 1, ctx - 1, ctx, s});
  // Paged: [sequence][block] units, a Fisher-Yates shuffle of all of them.
  std::vector<int32_t> tables(size_t(cache.rows));
  for (size_t u = 0; u < tables.size(); ++u) tables[u] = int32_t(u);
  SplitMix64 rng(11);
  for (size_t u = tables.size(); u > 1; --u) std::swap(tables[u - 1], tables[rng.below(u)]);
  cuda::DeviceBuffer tables_d(tables.size() * sizeof(int32_t), "bench block tables");
  KVCHECK_CUDA_CHECK(
      cudaMemcpy(tables_d.get(), tables.data(), tables_d.bytes(), cudaMemcpyHostToDevice));
  cuda::DeviceBuffer plan_d(plan.size() * sizeof(cuda::TokenSlot), "bench plan");
  KVCHECK_CUDA_CHECK(cudaMemcpy(plan_d.get(), plan.data(), plan_d.bytes(), cudaMemcpyHostToDevice));
  cuda::DeviceBuffer out(size_t(sequences) * shape.n_heads * shape.head_dim * sizeof(float),
                         "bench out");
  cuda::DeviceBuffer partial(
      cuda::attention_partial_floats(sequences, shape.n_heads, shape.head_dim, ctx) * sizeof(float),
      "bench partial");

  cuda::AttentionArgs args;
  args.qkv = qkv.as<float>();
  args.qkv_stride = qkv_stride;
  args.cache = cache;
  args.layer = 0;
  args.n_heads = shape.n_heads;
  args.plan = plan_d.as<cuda::TokenSlot>();
  args.n_tokens = sequences;
  args.max_keys = ctx;
  args.scale = 1.0f / std::sqrt(float(shape.head_dim));
  args.out = out.as<float>();
  args.partial = partial.as<float>();
  if (B > 0) {
    args.blocks = tables_d.as<int32_t>();
    args.blocks_stride = blocks_per_sequence;
    args.block_size = B;
  }

  cudaEvent_t begin, end;
  KVCHECK_CUDA_CHECK(cudaEventCreate(&begin));
  KVCHECK_CUDA_CHECK(cudaEventCreate(&end));
  cuda::launch_attention(args, nullptr);  // warm-up
  KVCHECK_CUDA_CHECK(cudaDeviceSynchronize());
  double seconds = 0;
  for (auto _ : state) {
    KVCHECK_CUDA_CHECK(cudaEventRecord(begin));
    cuda::launch_attention(args, nullptr);
    KVCHECK_CUDA_CHECK(cudaEventRecord(end));
    KVCHECK_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    KVCHECK_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    state.SetIterationTime(ms * 1e-3);
    seconds += ms * 1e-3;
  }
  KVCHECK_CUDA_CHECK(cudaEventDestroy(begin));
  KVCHECK_CUDA_CHECK(cudaEventDestroy(end));
  const double bytes = double(per_sequence) * sequences;
  const double rate = bytes * double(state.iterations()) / seconds;
  state.counters["sequences"] = sequences;
  state.counters["KV_GB"] = bytes * 1e-9;
  state.counters["TB/s"] = rate * 1e-12;
  state.counters["of_4.8TB/s"] = rate / kH200BytesPerSecond;
  state.SetLabel(std::string(shape.name) + (B > 0 ? " paged B=" + std::to_string(B) : ""));
}

Config gpt2_small() {
  Config c;
  c.family = Family::kGpt2;
  c.n_layers = 12;
  c.d_model = 768;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.head_dim = 64;
  c.d_ff = 3072;
  c.vocab = 50257;
  c.max_pos = 4096;
  c.qkv_bias = true;
  return c;
}

const Weights& gpt2_small_weights() {
  static const Weights weights = init_weights(gpt2_small(), 1);
  return weights;
}

std::vector<int32_t> prompt(int n, int vocab) {
  SplitMix64 rng(7);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(rng.below(uint64_t(vocab))));
  return t;
}

std::unique_ptr<Engine> make_engine(bool gpu, int capacity, int rows) {
  EngineOptions o;
  o.capacity = capacity;
  o.max_rows = rows;
  o.threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 256u));
  return gpu ? make_cuda_engine(gpt2_small(), gpt2_small_weights(), o)
             : make_cpu_engine(gpt2_small(), gpt2_small_weights(), o);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One decode step of `batch` sequences, each at context ctx; the prefixes
// are prefilled untimed before every step (the engine has no rollback).
void BM_DecodeStep(benchmark::State& state) {
  const bool gpu = state.range(0) != 0;
  const int ctx = int(state.range(1)), batch = int(state.range(2));
  auto engine = make_engine(gpu, ctx + 1, batch);
  const auto tokens = prompt(ctx + 1, gpt2_small().vocab);
  std::vector<float> logits;
  for (auto _ : state) {
    engine->reset();
    std::vector<BatchEntry> prefill, decode;
    for (int b = 0; b < batch; ++b) {
      const SequenceId s = engine->start();
      prefill.push_back({s, std::span<const int32_t>(tokens).first(size_t(ctx))});
      decode.push_back({s, std::span<const int32_t>(tokens).subspan(size_t(ctx), 1)});
    }
    engine->step(prefill, logits);
    const auto t0 = std::chrono::steady_clock::now();
    engine->step(decode, logits);
    state.SetIterationTime(seconds_since(t0));
  }
  state.SetLabel(std::string(gpu ? "cuda" : "cpu") + " gpt2-small vocab 50257");
}

// Prefill of n tokens into an empty cache; FLOPs as in bench/engine_bench.cpp.
void BM_Prefill(benchmark::State& state) {
  const bool gpu = state.range(0) != 0;
  const int n = int(state.range(1));
  auto engine = make_engine(gpu, n, 1);
  const Config c = gpt2_small();
  const auto tokens = prompt(n, c.vocab);
  std::vector<float> logits;
  double seconds = 0;
  for (auto _ : state) {
    engine->reset();
    const SequenceId s = engine->start();
    const BatchEntry entry{s, tokens};
    const auto t0 = std::chrono::steady_clock::now();
    engine->step(std::span<const BatchEntry>(&entry, 1), logits);
    const double d = seconds_since(t0);
    state.SetIterationTime(d);
    seconds += d;
  }
  const double E = c.d_model, F = c.d_ff, Q = c.q_width(), KV = c.kv_width();
  const double per_token_layer = 2.0 * (E * (Q + 2 * KV) + Q * E + 2 * E * F);
  const double attention = 2.0 * 2.0 * Q * (double(n) * (n + 1) / 2);
  const double flops = c.n_layers * (per_token_layer * n + attention) + 2.0 * E * c.vocab * n;
  state.counters["GFLOP/s"] = flops * 1e-9 * double(state.iterations()) / seconds;
  state.counters["tokens/s"] = n * double(state.iterations()) / seconds;
  state.SetLabel(std::string(gpu ? "cuda" : "cpu") + " gpt2-small vocab 50257");
}

void register_benchmarks() {
  for (int shape = 0; shape < int(std::size(kShapes)); ++shape) {
    for (int ctx : {4096, 8192, 16384, 32768}) {
      benchmark::RegisterBenchmark(
          (std::string("BM_DecodeAttention/") + kShapes[shape].name + "/" + std::to_string(ctx))
              .c_str(),
          BM_DecodeAttention)
          ->Args({shape, ctx, 0})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
    }
  }
  // Contiguous next to paged (B = 16) at context 2048, side by side.
  for (int shape = 0; shape < int(std::size(kShapes)); ++shape) {
    for (int B : {0, 16}) {
      benchmark::RegisterBenchmark((std::string("BM_DecodeAttention/") + kShapes[shape].name +
                                    "/2048" + (B > 0 ? "/paged16" : "/contiguous"))
                                       .c_str(),
                                   BM_DecodeAttention)
          ->Args({shape, 2048, B})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
    }
  }
  for (int gpu : {1, 0}) {
    for (auto [ctx, batch] : {std::pair{128, 1}, {512, 1}, {2048, 1}, {512, 32}}) {
      if (!gpu && batch > 1) continue;  // the CPU comparison stays at batch 1
      benchmark::RegisterBenchmark("BM_DecodeStep", BM_DecodeStep)
          ->Args({gpu, ctx, batch})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(gpu ? 20 : 5);
    }
    for (int n : {128, 512}) {
      benchmark::RegisterBenchmark("BM_Prefill", BM_Prefill)
          ->Args({gpu, n})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(gpu ? 10 : 2);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!cuda_device_available()) {
    std::printf("cuda_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
