// Engine benchmarks on a GPT-2-small-shaped model (12 layers, d_model 768,
// 12 heads of 64, d_ff 3072), one thread, f32:
//  - cached decode vs full recompute per generated token, side by side;
//  - decode step time against the memory roofline (weights + KV bytes over a
//    streaming-read probe measured in the same run);
//  - prefill throughput against an FMA-peak probe measured in the same run;
//  - the engine with every fault compiled in but off vs a build without them;
//  - paged vs contiguous decode attention on the kernel, and a paged fork of a
//    prompt's cache vs its prefill (docs/OPERATIONS.md);
//  - a prefix-cache hit on a prompt vs its cold prefill, side by side;
//  - windowed decode at context 8192 (W = 1024, every layer) vs plain decode
//    at context 1024, side by side (issue 15: within 10 %).
// docs/PERFORMANCE.md records the figures and the command.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "bench/probes.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/cpu/kernels.h"
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

// Decode attention at context `ctx` on the kernel itself (a whole decode step
// is dominated by the weights and would hide a slower attention): the 12
// heads of one layer over contiguous rows, and over paged blocks of 16 slots
// scattered through a pool in shuffled order, the two taking turns in every
// iteration (first one, then the other, first) so that both see the same
// machine state, each timed by this thread's CPU clock (the machine is
// shared).
void BM_PagedVsContiguousAttention(benchmark::State& state) {
  const size_t ctx = size_t(state.range(0)), B = 16, D = 64, heads = 12;
  const size_t n_blocks = (ctx + B - 1) / B;
  SplitMix64 rng(3);
  std::vector<float> contiguous_k(heads * ctx * D),
      contiguous_v(contiguous_k.size());  // [h][ctx][D]
  for (float& x : contiguous_k) x = float(rng.below(2000)) / 1000.0f - 1.0f;
  for (float& x : contiguous_v) x = float(rng.below(2000)) / 1000.0f - 1.0f;
  // The pool: [block][h][B][D]; logical block b of every head lives in pool block order[b].
  std::vector<size_t> order(n_blocks);
  for (size_t b = 0; b < n_blocks; ++b) order[b] = b;
  for (size_t b = n_blocks; b > 1; --b) std::swap(order[b - 1], order[size_t(rng.below(b))]);
  std::vector<float> pool_k(n_blocks * heads * B * D), pool_v(pool_k.size());  // [block][h][B][D]
  for (size_t h = 0; h < heads; ++h) {
    for (size_t j = 0; j < ctx; ++j) {
      const size_t at = ((order[j / B] * heads + h) * B + j % B) * D;
      std::copy_n(contiguous_k.data() + (h * ctx + j) * D, D, pool_k.data() + at);
      std::copy_n(contiguous_v.data() + (h * ctx + j) * D, D, pool_v.data() + at);
    }
  }
  std::vector<const void*> k_blocks(heads * n_blocks), v_blocks(heads * n_blocks);  // [h][block]
  for (size_t h = 0; h < heads; ++h) {
    for (size_t b = 0; b < n_blocks; ++b) {
      k_blocks[h * n_blocks + b] = pool_k.data() + (order[b] * heads + h) * B * D;
      v_blocks[h * n_blocks + b] = pool_v.data() + (order[b] * heads + h) * B * D;
    }
  }
  std::vector<float> q(heads * D, 0.01f), out(heads * D), paged_out(heads * D);  // [h][D]
  std::vector<float> scores(ctx);                                                // [ctx]
  const float scale = 0.125f;
  double contiguous_s = 0, paged_s = 0;
  const auto contiguous = [&] {
    const double t0 = bench::thread_cpu_seconds();
    for (size_t h = 0; h < heads; ++h) {
      cpu::attend(cpu::KernelPath::kSimd, q.data() + h * D, 1, contiguous_k.data() + h * ctx * D,
                  contiguous_v.data() + h * ctx * D, KvDtype::kF32, D, ctx, D, scale, scores.data(),
                  out.data() + h * D);
    }
    contiguous_s += bench::thread_cpu_seconds() - t0;
  };
  const auto paged = [&] {
    const double t0 = bench::thread_cpu_seconds();
    for (size_t h = 0; h < heads; ++h) {
      cpu::attend_paged(cpu::KernelPath::kSimd, q.data() + h * D, 1, &k_blocks[h * n_blocks],
                        &v_blocks[h * n_blocks], B, KvDtype::kF32, D, ctx, D, scale, scores.data(),
                        paged_out.data() + h * D);
    }
    paged_s += bench::thread_cpu_seconds() - t0;
  };
  // Who goes first alternates, so that neither always finds the caches as
  // the other left them.
  bool contiguous_first = true;
  for (auto _ : state) {
    if (contiguous_first) {
      contiguous(), paged();
    } else {
      paged(), contiguous();
    }
    contiguous_first = !contiguous_first;
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(paged_out.data());
  }
  if (out != paged_out) state.SkipWithError("paged attention differs from contiguous");
  const double n = double(state.iterations());
  state.counters["contiguous_us"] = contiguous_s / n * 1e6;
  state.counters["paged_us"] = paged_s / n * 1e6;
  state.counters["paged/contiguous"] = paged_s / contiguous_s;
}
BENCHMARK(BM_PagedVsContiguousAttention)->Arg(2048)->Unit(benchmark::kMicrosecond)->Iterations(400);

// Decode attention over q8_0 K/V against f16 (issue 15): one layer's heads
// at the given context, the same values stored both ways, the two taking
// turns in every iteration, each timed by the thread's CPU clock. Reports
// the bytes each reads (K and V rows, q8_0 scales included).
// args: context, heads, head_dim (12 x 64: GPT-2 small, whose f16 K/V at 2048
// fits in the last-level cache; 32 x 128: a 7B llama layer, which does not).
void BM_Int8VsF16Attention(benchmark::State& state) {
  const size_t ctx = size_t(state.range(0)), heads = size_t(state.range(1)),
               D = size_t(state.range(2));
  SplitMix64 rng(4);
  std::vector<float> values(2 * heads * ctx * D);  // [K, V][h][ctx][D]
  for (float& x : values) x = float(rng.below(2000)) / 1000.0f - 1.0f;
  const KvDtype dtypes[2] = {KvDtype::kF16, KvDtype::kQ8_0};
  std::vector<unsigned char> stored[2];  // per dtype: [K, V][h][ctx] rows of kv_row_bytes
  for (int t = 0; t < 2; ++t) {
    const size_t row = kv_row_bytes(dtypes[t], D);
    stored[t].resize(2 * heads * ctx * row);
    for (size_t r = 0; r < 2 * heads * ctx; ++r) {
      kv_store_row(values.data() + r * D, dtypes[t], D, stored[t].data() + r * row);
    }
  }
  std::vector<float> q(heads * D, 0.01f), out(heads * D);  // [h][D]
  std::vector<float> scores(ctx);                          // [ctx]
  double seconds[2] = {0, 0};
  for (auto _ : state) {
    for (int t = 0; t < 2; ++t) {
      const size_t head_bytes = ctx * kv_row_bytes(dtypes[t], D);
      const unsigned char* k = stored[t].data();
      const unsigned char* v = k + heads * head_bytes;
      const double t0 = bench::thread_cpu_seconds();
      for (size_t h = 0; h < heads; ++h) {
        cpu::attend(cpu::KernelPath::kSimd, q.data() + h * D, 1, k + h * head_bytes,
                    v + h * head_bytes, dtypes[t], D, ctx, D, 1.0f / 8, scores.data(),
                    out.data() + h * D);
      }
      seconds[t] += bench::thread_cpu_seconds() - t0;
      benchmark::DoNotOptimize(out.data());
    }
  }
  const double n = double(state.iterations());
  state.counters["f16_us"] = seconds[0] / n * 1e6;
  state.counters["q8_0_us"] = seconds[1] / n * 1e6;
  state.counters["q8_0/f16 time"] = seconds[1] / seconds[0];
  state.counters["f16_MB"] = double(stored[0].size()) * 1e-6;
  state.counters["q8_0_MB"] = double(stored[1].size()) * 1e-6;
  state.counters["q8_0/f16 bytes"] = double(stored[1].size()) / double(stored[0].size());
}
BENCHMARK(BM_Int8VsF16Attention)
    ->Args({2048, 12, 64})
    ->Args({2048, 32, 128})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(200);

// A fork of a prompt's whole cache in paged storage (blocks of 16 shared, no
// copy) against the prefill that built it: what sharing a cached prefix costs
// next to computing it (BM_PrefixHitVsPrefill below is the prefix cache's hit).
void BM_ForkVsPrefill(benchmark::State& state) {
  const int n = int(state.range(0)), vocab = 4096;
  const Config c = gpt2_small(vocab);
  EngineOptions o;
  o.capacity = n;
  o.max_rows = 2;
  o.block_size = 16;
  auto engine = make_cpu_engine(c, weights_for(vocab), o);
  const auto tokens = prompt(n, vocab);
  std::vector<float> logits;
  double prefill_s = 0, fork_s = 0;
  for (auto _ : state) {
    engine->reset();
    const SequenceId s = engine->start();
    auto t0 = std::chrono::steady_clock::now();
    feed(*engine, s, tokens, logits);
    prefill_s += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const SequenceId child = engine->fork(s, n);
    fork_s += seconds_since(t0);
    benchmark::DoNotOptimize(child);
  }
  state.counters["prefill_ms"] = prefill_s / double(state.iterations()) * 1e3;
  state.counters["fork_us"] = fork_s / double(state.iterations()) * 1e6;
  state.counters["fork/prefill"] = fork_s / prefill_s;
}
BENCHMARK(BM_ForkVsPrefill)->Arg(512)->Unit(benchmark::kMillisecond)->Iterations(3);

// The same prompt of n tokens twice in one engine with a prefix cache (blocks
// of 16): cold (nothing cached; the whole prompt is computed), then, after the
// first sequence finished, warm (a hit on every block: n - 1 tokens reused, the
// last block copied, the last token computed). Both give the last token's logits; they must agree
// bitwise (docs/OPERATIONS.md, P15). Thread CPU time: on a shared machine
// wall time measures the neighbours as much as the engine.
void BM_PrefixHitVsPrefill(benchmark::State& state) {
  const int n = int(state.range(0)), vocab = 4096, B = 16;
  const Config c = gpt2_small(vocab);
  EngineOptions o;
  o.capacity = n;
  o.max_rows = 2;
  o.block_size = B;
  o.prefix_cache = true;
  auto engine = make_cpu_engine(c, weights_for(vocab), o);
  const auto tokens = prompt(n, vocab);
  std::vector<float> cold, warm;
  double prefill_s = 0, hit_s = 0;
  for (auto _ : state) {
    engine->reset();
    engine->flush_prefix_cache();
    const SequenceId first = engine->start();
    double t0 = bench::thread_cpu_seconds();
    feed(*engine, first, tokens, cold);
    prefill_s += bench::thread_cpu_seconds() - t0;
    engine->finish(first);  // its full blocks stay cached
    const SequenceId second = engine->start();
    t0 = bench::thread_cpu_seconds();
    feed(*engine, second, tokens, warm);
    hit_s += bench::thread_cpu_seconds() - t0;
    if (engine->reused(second) != n - 1) state.SkipWithError("no full prefix hit");
    const size_t last = size_t(n - 1) * size_t(vocab);
    if (!std::equal(cold.begin() + std::ptrdiff_t(last), cold.end(),
                    warm.begin() + std::ptrdiff_t(last))) {
      state.SkipWithError("the hit's last logits differ from the cold prefill's");
    }
  }
  state.counters["prefill_ms"] = prefill_s / double(state.iterations()) * 1e3;
  state.counters["hit_ms"] = hit_s / double(state.iterations()) * 1e3;
  state.counters["hit/prefill"] = hit_s / prefill_s;
}
BENCHMARK(BM_PrefixHitVsPrefill)->Arg(512)->Unit(benchmark::kMillisecond)->Iterations(3);

// Decode at context 8192 in a model whose every layer has a window of 1024
// (rings of 1024 slots: each query reads 1024 keys) vs the same model without
// a window at context 1024, decodes alternating between the two engines so
// both see the same machine load. Both prompts are prefilled once, untimed
// (the 8192-token prefill takes tens of seconds); each iteration then decodes
// one more token in each (contexts 8192 + i and 1024 + i). Thread CPU time,
// as above; the median ratio is the figure.
void BM_WindowedVsPlainDecode(benchmark::State& state) {
  const int vocab = 4096, W = 1024, long_ctx = 8192, short_ctx = 1024, decodes = 44;
  Config plain = gpt2_small(vocab);
  plain.max_pos = long_ctx + decodes;
  Config windowed = plain;
  windowed.sliding_window = W;
  const Weights weights = init_weights(plain, 1);  // the window changes no weight
  EngineOptions wide_options, narrow_options;
  wide_options.max_rows = narrow_options.max_rows = 1;
  wide_options.capacity = long_ctx + decodes;
  narrow_options.capacity = short_ctx + decodes;
  // The engine built first gets other memory (BM_FaultSwitchCost measured
  // about +-6 % from that alone), so the benchmark runs in both orders.
  std::unique_ptr<Engine> wide, narrow;
  if (state.range(0) == 0) {
    wide = make_cpu_engine(windowed, weights, wide_options);
    narrow = make_cpu_engine(plain, weights, narrow_options);
  } else {
    narrow = make_cpu_engine(plain, weights, narrow_options);
    wide = make_cpu_engine(windowed, weights, wide_options);
  }
  const auto tokens = prompt(long_ctx + decodes, vocab);
  std::vector<float> logits;
  const SequenceId ws = wide->start(), ns = narrow->start();
  feed(*wide, ws, std::span<const int32_t>(tokens).first(size_t(long_ctx)), logits);
  feed(*narrow, ns, std::span<const int32_t>(tokens).first(size_t(short_ctx)), logits);
  std::vector<double> ratios;
  double windowed_s = 0, plain_s = 0;
  int i = 0;
  for (auto _ : state) {
    if (i == decodes) {
      state.SkipWithError("more iterations than prepared tokens");
      break;
    }
    const auto one = [&](Engine& e, SequenceId s, int ctx) {
      const double t0 = bench::thread_cpu_seconds();
      feed(e, s, std::span<const int32_t>(tokens).subspan(size_t(ctx + i), 1), logits);
      return bench::thread_cpu_seconds() - t0;
    };
    double a, b;
    if (i % 2 == 0) {
      a = one(*wide, ws, long_ctx), b = one(*narrow, ns, short_ctx);
    } else {
      b = one(*narrow, ns, short_ctx), a = one(*wide, ws, long_ctx);
    }
    state.SetIterationTime(a);
    windowed_s += a, plain_s += b, ++i;
    ratios.push_back(a / b);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["windowed_8192_ms"] = 1e3 * windowed_s / double(i);
  state.counters["plain_1024_ms"] = 1e3 * plain_s / double(i);
  state.counters["median_windowed/plain"] = ratios[ratios.size() / 2];
  state.counters["min_ratio"] = ratios.front();
  state.counters["max_ratio"] = ratios.back();
}
BENCHMARK(BM_WindowedVsPlainDecode)
    ->ArgName("plain_built_first")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(40);

}  // namespace

BENCHMARK_MAIN();
