// Engine benchmarks on a GPT-2-small-shaped model (12 layers, d_model 768,
// 12 heads of 64, d_ff 3072), one thread, f32:
//  - cached decode vs full recompute per generated token, side by side;
//  - decode step time against the memory roofline (weights + KV bytes over a
//    streaming-read probe measured in the same run);
//  - prefill throughput against an FMA-peak probe measured in the same run;
//  - the engine with every fault compiled in but off vs a build without them.
// docs/PERFORMANCE.md records the figures and the command.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "bench/probes.h"
#include "engine/cpu/cpu_engine.h"
#include "model/rng.h"

namespace {

using namespace kvcheck;

Config gpt2_small(int vocab) {
  Config c;
  c.family = Family::kGpt2;
  c.n_layers = 12;
  c.d_model = 768;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.head_dim = 64;
  c.d_ff = 3072;
  c.vocab = vocab;
  c.max_pos = 4096;
  c.qkv_bias = true;
  return c;
}

std::vector<int32_t> prompt(int n, int vocab) {
  SplitMix64 rng(7);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(rng.below(uint64_t(vocab))));
  return t;
}

const Weights& weights_for(int vocab) {
  static std::map<int, Weights> cache;
  auto it = cache.find(vocab);
  if (it == cache.end()) it = cache.emplace(vocab, init_weights(gpt2_small(vocab), 1)).first;
  return it->second;
}

double probe_gbps() {
  static const double gbps = bench::stream_read_gbps();
  return gbps;
}

double probe_gflops() {
  static const double g = bench::fma_peak_gflops();
  return g;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void feed(Engine& e, SequenceId s, std::span<const int32_t> tokens, std::vector<float>& logits) {
  const BatchEntry entry{s, tokens};
  e.step(std::span<const BatchEntry>(&entry, 1), logits);
}

// Per generated token: one cached decode at context `ctx`, vs recomputing the
// whole prefix of ctx+1 tokens from an empty cache (what a cacheless model does).
void BM_CachedVsRecompute(benchmark::State& state) {
  const int ctx = int(state.range(0)), vocab = 4096;
  const Config c = gpt2_small(vocab);
  EngineOptions o;
  o.capacity = ctx + 64;
  o.max_rows = 1;
  auto engine = make_cpu_engine(c, weights_for(vocab), o);
  const auto tokens = prompt(ctx + 64, vocab);
  std::vector<float> logits;
  double decode_s = 0, recompute_s = 0;
  int n = 0;
  for (auto _ : state) {
    engine->reset();
    const SequenceId s = engine->start();
    feed(*engine, s, std::span<const int32_t>(tokens).first(size_t(ctx)), logits);
    auto t0 = std::chrono::steady_clock::now();
    feed(*engine, s, std::span<const int32_t>(tokens).subspan(size_t(ctx), 1), logits);
    const double d = seconds_since(t0);
    engine->reset();
    const SequenceId r = engine->start();
    t0 = std::chrono::steady_clock::now();
    feed(*engine, r, std::span<const int32_t>(tokens).first(size_t(ctx) + 1), logits);
    const double full = seconds_since(t0);
    state.SetIterationTime(d);
    decode_s += d, recompute_s += full, ++n;
  }
  state.counters["decode_ms"] = 1e3 * decode_s / n;
  state.counters["recompute_ms"] = 1e3 * recompute_s / n;
  state.counters["recompute/decode"] = recompute_s / decode_s;
  state.SetLabel("vocab 4096");
}
BENCHMARK(BM_CachedVsRecompute)
    ->Arg(128)
    ->Arg(512)
    ->Arg(2048)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// Engine and its prefix, ready to decode the next token at context ctx.
struct DecodeFixture {
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> tokens;
  std::vector<float> logits;

  DecodeFixture(std::unique_ptr<Engine> e, int ctx, int vocab)
      : engine(std::move(e)), tokens(prompt(ctx + 1, vocab)) {}

  // Prefills the prefix (untimed), then returns the seconds of one decode at
  // context ctx. The engine has no rollback, so every decode starts over.
  double decode_once() {
    const size_t ctx = tokens.size() - 1;
    engine->reset();
    const SequenceId s = engine->start();
    feed(*engine, s, std::span<const int32_t>(tokens).first(ctx), logits);
    const auto t0 = std::chrono::steady_clock::now();
    feed(*engine, s, std::span<const int32_t>(tokens).subspan(ctx, 1), logits);
    return seconds_since(t0);
  }
};

EngineOptions decode_options(int ctx) {
  EngineOptions o;
  o.capacity = ctx + 1;
  o.max_rows = 1;
  return o;
}

// Decode steps at a fixed context against the memory roofline: every step must
// read all weights once and the sequence's whole K/V.
void BM_DecodeStep(benchmark::State& state) {
  const int ctx = int(state.range(0)), vocab = int(state.range(1));
  const Config c = gpt2_small(vocab);
  DecodeFixture f(make_cpu_engine(c, weights_for(vocab), decode_options(ctx)), ctx, vocab);
  double decode_s = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const double d = f.decode_once();
    state.ResumeTiming();
    state.SetIterationTime(d);
    decode_s += d;
  }
  // Must-read bytes: every weight except the embedding tables, of which a
  // decode reads one row each, plus the sequence's K and V in every layer.
  const double embedding_tables = double(c.vocab + c.max_pos) * c.d_model * sizeof(float);
  const double kv_bytes = 2.0 * c.n_layers * (ctx + 1) * c.kv_width() * sizeof(float);
  const double bytes = double(f.engine->memory().weight_bytes) - embedding_tables +
                       2.0 * c.d_model * sizeof(float) + kv_bytes;
  const double roofline_s = bytes * 1e-9 / probe_gbps();
  state.counters["roofline_ms"] = roofline_s * 1e3;
  state.counters["probe_GB/s"] = probe_gbps();
  state.counters["of_roofline"] = roofline_s / (decode_s / double(state.iterations()));
  state.SetLabel("vocab " + std::to_string(vocab));
}
BENCHMARK(BM_DecodeStep)
    ->Args({128, 50257})
    ->Args({512, 4096})
    ->Args({2048, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10);

// Faults compiled in but off vs the same engine compiled without them, decodes
// alternating between the two so both see the same machine load.
void BM_FaultSwitchCost(benchmark::State& state) {
  const int ctx = 128, vocab = 4096;
  const Config c = gpt2_small(vocab);
  // Which engine is built first moves its weights' placement and shifts the
  // ratio by about +-6 % on its own (measured), so the benchmark runs in both
  // orders; the cost of the switches is the geometric mean of the two.
  const bool build_with_first = state.range(0) == 0;
  std::unique_ptr<Engine> first =
      build_with_first ? make_cpu_engine(c, weights_for(vocab), decode_options(ctx))
                       : make_cpu_engine_without_faults(c, weights_for(vocab), decode_options(ctx));
  std::unique_ptr<Engine> second =
      build_with_first ? make_cpu_engine_without_faults(c, weights_for(vocab), decode_options(ctx))
                       : make_cpu_engine(c, weights_for(vocab), decode_options(ctx));
  DecodeFixture with(build_with_first ? std::move(first) : std::move(second), ctx, vocab);
  DecodeFixture without(build_with_first ? std::move(second) : std::move(first), ctx, vocab);
  std::vector<double> ratios;
  double with_s = 0, without_s = 0;
  for (auto _ : state) {
    state.PauseTiming();
    // Alternate which engine goes first, so neither gains from the order.
    const bool with_first = state.iterations() % 2 == 0;
    double a, b;
    if (with_first) {
      a = with.decode_once(), b = without.decode_once();
    } else {
      b = without.decode_once(), a = with.decode_once();
    }
    state.ResumeTiming();
    state.SetIterationTime(a);
    with_s += a, without_s += b;
    ratios.push_back(a / b);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["with_ms"] = 1e3 * with_s / double(state.iterations());
  state.counters["without_ms"] = 1e3 * without_s / double(state.iterations());
  state.counters["median_with/without"] = ratios[ratios.size() / 2];
}
BENCHMARK(BM_FaultSwitchCost)
    ->ArgName("without_built_first")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(41);

// Prefill of n tokens into an empty cache, FLOPs counted as 2 per multiply-add
// of every projection, the attention (QK^T and PV over the causal triangle)
// and the output head.
void BM_Prefill(benchmark::State& state) {
  const int n = int(state.range(0)), vocab = 4096;
  const Config c = gpt2_small(vocab);
  EngineOptions o;
  o.capacity = n;
  o.max_rows = 1;
  auto engine = make_cpu_engine(c, weights_for(vocab), o);
  const auto tokens = prompt(n, vocab);
  std::vector<float> logits;
  double prefill_s = 0;
  for (auto _ : state) {
    engine->reset();
    const SequenceId s = engine->start();
    const auto t0 = std::chrono::steady_clock::now();
    feed(*engine, s, tokens, logits);
    prefill_s += seconds_since(t0);
  }
  const double E = c.d_model, F = c.d_ff, Q = c.q_width(), KV = c.kv_width();
  const double per_token_layer = 2.0 * (E * (Q + 2 * KV) + Q * E + 2 * E * F);
  const double attention = 2.0 * 2.0 * Q * (double(n) * (n + 1) / 2);  // per layer
  const double flops = c.n_layers * (per_token_layer * n + attention) + 2.0 * E * c.vocab * n;
  const double gflops = flops * 1e-9 / (prefill_s / double(state.iterations()));
  state.counters["GFLOP/s"] = gflops;
  state.counters["probe_GFLOP/s"] = probe_gflops();
  state.counters["of_peak"] = gflops / probe_gflops();
}
BENCHMARK(BM_Prefill)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
