// The CUDA engine's own tests, mirroring tests/engine/: against the oracle
// within the derived bound, against the CPU engine (P10's bound), bitwise
// invariance with itself (chunking, batch and row, reset, compaction,
// determinism), every fault switch on its minimal case with the CPU engine's
// behaviour, the errors and the memory formula. Every test skips cleanly
// without a device. The "wide" models cross the kernels' fixed cut points
// (matmul k segments of 128, attention splits of 128 keys, 8 query heads per
// attention block) that the tiny models never reach.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <variant>

#include "engine/cpu/cpu_engine.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fault_cases.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvcheck::test {
namespace {

struct GpuModel {
  ModelCase model;
  int tokens;    // prompt length the tests feed
  int capacity;  // engine capacity (> tokens)
};
void PrintTo(const GpuModel& m, std::ostream* out) {
  *out << m.model.name;
}

std::vector<GpuModel> gpu_models() {
  std::vector<GpuModel> models;
  for (const ModelCase& m : model_cases()) models.push_back({m, 20, 48});
  // 3 matmul segments (320 = 128 + 128 + 64), 3 attention splits, MHA.
  Config wide_gpt2 = gpt2_tiny();
  wide_gpt2.n_layers = 2, wide_gpt2.d_model = 320, wide_gpt2.n_heads = 5;
  wide_gpt2.n_kv_heads = 5, wide_gpt2.head_dim = 64, wide_gpt2.d_ff = 640;
  wide_gpt2.vocab = 97, wide_gpt2.max_pos = 512;
  models.push_back({{"gpt2_wide_mha", wide_gpt2}, 270, 300});
  // MQA with 16 query heads (two attention head blocks), odd widths.
  Config wide_llama = llama_tiny();
  wide_llama.n_layers = 2, wide_llama.d_model = 300, wide_llama.n_heads = 16;
  wide_llama.n_kv_heads = 1, wide_llama.head_dim = 32, wide_llama.d_ff = 520;
  wide_llama.vocab = 101, wide_llama.max_pos = 512;
  models.push_back({{"llama_wide_mqa16", wide_llama}, 270, 300});
  // GQA with head_dim 256 (the kernel's limit) and 12 heads over 4 KV heads.
  Config big_head = llama_tiny();
  big_head.n_layers = 1, big_head.d_model = 64, big_head.n_heads = 12;
  big_head.n_kv_heads = 4, big_head.head_dim = 256, big_head.d_ff = 96;
  big_head.vocab = 50, big_head.max_pos = 256;
  models.push_back({{"llama_gqa_d256", big_head}, 140, 160});
  return models;
}

std::unique_ptr<Engine> make(const Config& c, const Weights& w, const EngineOptions& o) {
  return make_cuda_engine(c, w, o);
}

std::vector<float> cuda_solo(const Config& c, const Weights& w, const EngineOptions& o,
                             const std::vector<int32_t>& tokens) {
  auto engine = make(c, w, o);
  const SequenceId s = engine->start();
  return feed(*engine, s, tokens, {static_cast<int>(tokens.size())});
}

// |engine - oracle| <= factor * derived bound for every logit (factor 1:
// P1; factor 2 against another engine: P10).
void expect_within_bound(const Config& c, const Weights& w, KvDtype dtype,
                         const std::vector<int32_t>& tokens, const std::vector<float>& logits,
                         const std::vector<double>* other, double factor,
                         const std::string& context) {
  const ErrorBounds bounds = derive_error_bounds(c, w, tokens, dtype);
  std::vector<double> reference;
  if (other == nullptr) reference = oracle::forward(c, w, tokens).logits;
  const std::vector<double>& ref = other != nullptr ? *other : reference;
  ASSERT_EQ(logits.size(), ref.size()) << context;
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double ratio = std::abs(double(logits[i]) - ref[i]) / (factor * bounds.logits[i]);
    ASSERT_TRUE(std::isfinite(logits[i]) && ratio <= 1.0)
        << context << ": token " << i / size_t(c.vocab) << " vocab " << i % size_t(c.vocab)
        << ": cuda " << logits[i] << " reference " << ref[i] << " error/bound " << ratio;
    worst = std::max(worst, ratio);
  }
  std::cout << context << ": worst error/bound " << worst << "\n";
}

using Param = std::tuple<GpuModel, KvDtype>;

class CudaEngine : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { KVCHECK_REQUIRE_GPU(); }
  const Config& config() const { return std::get<0>(GetParam()).model.config; }
  int n_tokens() const { return std::get<0>(GetParam()).tokens; }
  EngineOptions options() const {
    EngineOptions o;
    o.capacity = std::get<0>(GetParam()).capacity;
    o.max_rows = 4;
    o.kv_dtype = std::get<1>(GetParam());
    return o;
  }
  Weights weights() const { return init_weights(config(), 11); }
  std::string label(const std::string& what) const {
    return std::get<0>(GetParam()).model.name + " " + kv_dtype_name(options().kv_dtype) + " " +
           what;
  }
};

TEST_P(CudaEngine, MatchesOracleOnPrefillDecodeAndChunks) {
  const auto tokens = random_tokens(2, n_tokens(), config().vocab);
  const Weights w = weights();
  std::vector<int> chunks = {n_tokens() - 6, 1, 1, 1, 1, 1, 1};
  auto engine = make(config(), w, options());
  const SequenceId s = engine->start();
  expect_within_bound(config(), w, options().kv_dtype, tokens, feed(*engine, s, tokens, chunks),
                      nullptr, 1.0, label("prefill + 6 decodes vs oracle"));
  auto chunked = make(config(), w, options());
  const SequenceId c = chunked->start();
  expect_within_bound(config(), w, options().kv_dtype, tokens,
                      feed(*chunked, c, tokens, random_chunks(5, n_tokens())), nullptr, 1.0,
                      label("random chunks vs oracle"));
}

TEST_P(CudaEngine, MatchesCpuEngineWithinTwiceTheBound) {
  const auto tokens = random_tokens(3, n_tokens(), config().vocab);
  const Weights w = weights();
  const std::vector<float> cpu = solo_run(config(), w, options(), tokens);
  const std::vector<double> cpu_wide(cpu.begin(), cpu.end());
  auto engine = make(config(), w, options());
  const SequenceId s = engine->start();
  expect_within_bound(config(), w, options().kv_dtype, tokens,
                      feed(*engine, s, tokens, random_chunks(9, n_tokens())), &cpu_wide, 2.0,
                      label("cuda vs cpu (P10)"));
}

TEST_P(CudaEngine, ChunkingDoesNotChangeBits) {
  const auto tokens = random_tokens(7, n_tokens(), config().vocab);
  const Weights w = weights();
  const auto whole = cuda_solo(config(), w, options(), tokens);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    auto engine = make(config(), w, options());
    const SequenceId s = engine->start();
    expect_bitwise(whole, feed(*engine, s, tokens, random_chunks(seed, n_tokens())),
                   label("chunk seed " + std::to_string(seed)));
  }
  auto engine = make(config(), w, options());
  const SequenceId s = engine->start();
  expect_bitwise(whole, feed(*engine, s, tokens, std::vector<int>(size_t(n_tokens()), 1)),
                 label("token by token"));
}

TEST_P(CudaEngine, BatchAndRowDoNotChangeBits) {
  const Weights w = weights();
  const int T = std::min(n_tokens(), 40);
  const auto target = random_tokens(8, T, config().vocab);
  const auto whole = cuda_solo(config(), w, options(), target);
  const int prefill = T - 6;
  for (int row = 0; row < 3; ++row) {
    auto engine = make(config(), w, options());
    std::vector<SequenceId> others;
    for (int i = 0; i < row; ++i) others.push_back(engine->start());
    const SequenceId s = engine->start();
    others.push_back(engine->start());
    std::vector<std::vector<int32_t>> other_tokens;
    for (size_t i = 0; i < others.size(); ++i) {
      other_tokens.push_back(random_tokens(900 + i, T + 8, config().vocab));
    }
    // One step: the target's prefill beside other sequences' chunks of other
    // lengths (so the step's token count and max key count differ from the
    // solo run's); then decodes side by side.
    std::vector<float> got, logits;
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < others.size(); ++i) {
      batch.push_back({others[i], std::span<const int32_t>(other_tokens[i]).first(3 + 5 * i)});
    }
    const size_t before = batch.size() / 2;
    batch.insert(batch.begin() + long(before),
                 {s, std::span<const int32_t>(target).first(size_t(prefill))});
    engine->step(batch, logits);
    size_t offset = 0;
    for (size_t i = 0; i < before; ++i) offset += batch[i].tokens.size();
    const size_t V = size_t(config().vocab);
    got.insert(got.end(), logits.begin() + long(offset * V),
               logits.begin() + long((offset + size_t(prefill)) * V));
    for (int t = prefill; t < T; ++t) {
      batch.clear();
      for (size_t i = 0; i < others.size(); ++i) {
        batch.push_back({others[i], std::span<const int32_t>(other_tokens[i])
                                        .subspan(3 + 5 * i + size_t(t - prefill), 1)});
      }
      batch.insert(batch.begin() + long(before),
                   {s, std::span<const int32_t>(target).subspan(size_t(t), 1)});
      engine->step(batch, logits);
      got.insert(got.end(), logits.begin() + long(before * V),
                 logits.begin() + long((before + 1) * V));
    }
    expect_bitwise(whole, got, label("row " + std::to_string(row)));
  }
}

TEST_P(CudaEngine, ResetAndReusedRowsStartClean) {
  const Weights w = weights();
  const auto a = random_tokens(9, 12, config().vocab);
  const auto b = random_tokens(10, 9, config().vocab);
  const auto fresh_b = cuda_solo(config(), w, options(), b);
  auto engine = make(config(), w, options());
  feed(*engine, engine->start(), a, {5, 7});
  engine->reset();
  const SequenceId s = engine->start();
  expect_bitwise(fresh_b, feed(*engine, s, b, {9}), label("after reset"));
  engine->finish(s);
  const SequenceId t = engine->start();
  expect_bitwise(fresh_b, feed(*engine, t, b, {2, 7}), label("freed and reused row"));
}

TEST_P(CudaEngine, CompactionKeepsSurvivorsBits) {
  const Weights w = weights();
  const auto a = random_tokens(11, 8, config().vocab);
  const auto c = random_tokens(13, 8, config().vocab);
  auto engine = make(config(), w, options());
  const SequenceId ia = engine->start(), ib = engine->start(), ic = engine->start();
  feed(*engine, ia, a, {8});
  feed(*engine, ib, random_tokens(12, 4, config().vocab), {4});
  auto got_c = feed(*engine, ic, std::vector<int32_t>(c.begin(), c.begin() + 4), {4});
  engine->finish(ib);  // c moves from row 2 to row 1
  auto rest_c = feed(*engine, ic, std::vector<int32_t>(c.begin() + 4, c.end()), {1, 3});
  got_c.insert(got_c.end(), rest_c.begin(), rest_c.end());
  expect_bitwise(cuda_solo(config(), w, options(), c), got_c, label("survivor c"));
  engine->finish(ia);  // c moves to row 0
  EXPECT_EQ(engine->length(ic), 8);
  const CacheSnapshot snap = engine->cache(ic, config().n_layers - 1);
  ASSERT_EQ(snap.length, 8);
  for (int p = 0; p < 8; ++p) EXPECT_FALSE(std::isnan(snap.k_at(p, 0, 0))) << "slot " << p;
}

TEST_P(CudaEngine, SameScenarioTwiceSameBits) {
  const Weights w = weights();
  const auto tokens = random_tokens(14, n_tokens(), config().vocab);
  expect_bitwise(cuda_solo(config(), w, options(), tokens),
                 cuda_solo(config(), w, options(), tokens), label("determinism"));
}

TEST_P(CudaEngine, CacheMatchesCpuEngineCache) {
  // The snapshot holds what was stored: same length and layout as the CPU's,
  // values within storage rounding of each other's scale.
  const Weights w = weights();
  const auto tokens = random_tokens(15, 10, config().vocab);
  auto gpu = make(config(), w, options());
  auto cpu = make_cpu_engine(config(), w, options());
  const SequenceId gs = gpu->start(), cs = cpu->start();
  feed(*gpu, gs, tokens, {4, 6});
  feed(*cpu, cs, tokens, {4, 6});
  for (int layer = 0; layer < config().n_layers; ++layer) {
    const CacheSnapshot g = gpu->cache(gs, layer), c = cpu->cache(cs, layer);
    ASSERT_EQ(g.length, c.length);
    ASSERT_EQ(g.k.size(), c.k.size());
    double scale = 0, diff = 0;
    for (int p = 0; p < g.length; ++p) {
      for (int h = 0; h < g.n_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) {
          scale = std::max(
              {scale, double(std::abs(c.k_at(p, h, d))), double(std::abs(c.v_at(p, h, d)))});
          diff = std::max({diff, double(std::abs(g.k_at(p, h, d) - c.k_at(p, h, d))),
                           double(std::abs(g.v_at(p, h, d) - c.v_at(p, h, d)))});
        }
      }
    }
    // Loose on purpose (P6 checks the derived bound); catches layout errors.
    EXPECT_LE(diff, 1e-2 * std::max(1.0, scale)) << label("layer " + std::to_string(layer));
  }
}

// ---- the operations of docs/OPERATIONS.md ------------------------------------

// Paged storage reads every key through the block table in the same order as
// contiguous storage: the same logits and the same cache, bit for bit.
TEST_P(CudaEngine, PagedStorageGivesContiguousBits) {
  const Weights w = weights();
  const auto tokens = random_tokens(16, n_tokens(), config().vocab);
  auto contiguous = make(config(), w, options());
  const SequenceId cs = contiguous->start();
  const std::vector<float> whole = feed(*contiguous, cs, tokens, {n_tokens()});
  for (const int B : {1, 5, 16}) {
    EngineOptions paged = options();
    paged.block_size = B;
    auto engine = make(config(), w, paged);
    const SequenceId s = engine->start();
    const std::string what = label("block size " + std::to_string(B));
    expect_bitwise(whole, feed(*engine, s, tokens, random_chunks(uint64_t(B), n_tokens())), what);
    for (int layer = 0; layer < config().n_layers; ++layer) {
      EXPECT_EQ(engine->cache(s, layer).k, contiguous->cache(cs, layer).k) << what;
      EXPECT_EQ(engine->cache(s, layer).v, contiguous->cache(cs, layer).v) << what;
    }
    engine->finish(s);
    EXPECT_EQ(engine->pool().used, 0) << what;
    EXPECT_EQ(engine->unheld_storage_check(), "") << what;
  }
}

// A forked child is its content fed to a fresh engine; the parent is
// unchanged by the child's writes; truncate-then-refeed is never-fed. In
// contiguous storage and in blocks of 4 (the fork lands mid-block).
TEST_P(CudaEngine, ForkAndTruncateEqualAFreshEngine) {
  const Weights w = weights();
  const int T = std::min(n_tokens(), 40), n = T / 2 + 1, own = 6;
  const auto tokens = random_tokens(17, T + own, config().vocab);
  const std::vector<int32_t> parent(tokens.begin(), tokens.begin() + T);
  const std::vector<int32_t> child_tail(tokens.begin() + T, tokens.end());
  std::vector<int32_t> child_content(tokens.begin(), tokens.begin() + n);
  child_content.insert(child_content.end(), child_tail.begin(), child_tail.end());
  const std::vector<float> child_fresh = cuda_solo(config(), w, options(), child_content);
  const size_t V = size_t(config().vocab);
  for (const int B : {0, 4}) {
    EngineOptions o = options();
    o.block_size = B;
    const std::string what = label("block size " + std::to_string(B));
    auto engine = make(config(), w, o);
    const SequenceId p = engine->start();
    feed(*engine, p, parent, {T});
    const SequenceId c = engine->fork(p, n);
    const std::vector<float> child = feed(*engine, c, child_tail, {2, 1, 1, 1, 1});
    expect_bitwise(
        std::vector<float>(child_fresh.begin() + std::ptrdiff_t(size_t(n) * V), child_fresh.end()),
        child, what + ": fork child");
    // The parent goes on as if no child existed: its next token's logits
    // equal those of the same stream on a fresh engine.
    std::vector<int32_t> longer = parent;
    longer.push_back(tokens[size_t(n)]);
    const std::vector<float> solo = cuda_solo(config(), w, options(), longer);
    const std::vector<float> next = feed(*engine, p, {tokens[size_t(n)]}, {1});
    expect_bitwise(std::vector<float>(solo.end() - std::ptrdiff_t(V), solo.end()), next,
                   what + ": parent after the fork");
    // Truncate back to n and refeed the child's tail: the child's content.
    engine->truncate(p, T + 1 - n);
    expect_bitwise(
        std::vector<float>(child_fresh.begin() + std::ptrdiff_t(size_t(n) * V), child_fresh.end()),
        feed(*engine, p, child_tail, {own}), what + ": truncate then refeed");
    EXPECT_EQ(engine->unheld_storage_check(), "") << what;
    engine->finish(c);
    engine->finish(p);
    EXPECT_EQ(engine->unheld_storage_check(), "") << what;
    if (B > 0) {
      EXPECT_EQ(engine->pool().free, engine->pool().total) << what;
    }
  }
}

// A second sequence whose prompt starts with a cached one's reuses its full
// blocks: only the rest is computed, bitwise as a cold run.
TEST_P(CudaEngine, PrefixCacheHitEqualsColdRun) {
  const Weights w = weights();
  const int T = std::min(n_tokens(), 40);
  const auto tokens = random_tokens(18, T, config().vocab);
  const std::vector<float> cold = cuda_solo(config(), w, options(), tokens);
  EngineOptions o = options();
  o.block_size = 4;
  o.prefix_cache = true;
  auto engine = make(config(), w, o);
  const SequenceId first = engine->start();
  feed(*engine, first, tokens, {T});
  engine->finish(first);
  const SequenceId second = engine->start();
  const std::vector<float> warm = feed(*engine, second, tokens, {T});
  const int k = engine->reused(second);
  // Every full block of the first prompt is cached; the last token is always computed.
  ASSERT_EQ(k, std::min(T / 4 * 4, T - 1)) << label("tokens reused");
  const size_t V = size_t(config().vocab);
  for (size_t i = 0; i < size_t(k) * V; ++i) ASSERT_TRUE(std::isnan(warm[i])) << i;
  expect_bitwise(std::vector<float>(cold.begin() + std::ptrdiff_t(size_t(k) * V), cold.end()),
                 std::vector<float>(warm.begin() + std::ptrdiff_t(size_t(k) * V), warm.end()),
                 label("prefix hit vs cold"));
  engine->finish(second);
  engine->flush_prefix_cache();
  EXPECT_EQ(engine->pool().free, engine->pool().total) << label("after flush");
  EXPECT_EQ(engine->unheld_storage_check(), "") << label("after flush");
}

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param).model.name + "_" + kv_dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllModels, CudaEngine,
                         ::testing::Combine(::testing::ValuesIn(gpu_models()),
                                            ::testing::Values(KvDtype::kF32, KvDtype::kBF16,
                                                              KvDtype::kF16)),
                         name_of);

// ---- faults: tests/engine/engine_faults_test.cpp's minimal cases ----------

Outcome run(const MinimalCase& m, FaultSet faults, bool on_gpu) {
  return run_minimal_case(m, faults,
                          on_gpu ? MakeEngine(make_cuda_engine) : MakeEngine(make_cpu_engine));
}

bool same(const Outcome& a, const Outcome& b) {
  return same_outcome(a, b);
}

// The same fault on both engines: the same kind of outcome (logits or the
// same error message) and NaN in the same places; the values themselves
// differ by rounding only.
void expect_same_behaviour(const Outcome& gpu, const Outcome& cpu, const std::string& what) {
  ASSERT_EQ(gpu.index(), cpu.index()) << what << ": one engine refused, the other did not";
  if (gpu.index() == 1) {
    EXPECT_EQ(std::get<1>(gpu), std::get<1>(cpu)) << what;
    return;
  }
  const auto& g = std::get<0>(gpu);
  const auto& c = std::get<0>(cpu);
  ASSERT_EQ(g.size(), c.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(std::isnan(g[i]), std::isnan(c[i])) << what << ": logit " << i;
    if (!std::isnan(c[i])) {
      ASSERT_LE(std::abs(g[i] - c[i]), 1e-3 * std::max(1.0f, std::abs(c[i])))
          << what << ": logit " << i;
    }
  }
}

TEST(CudaFaults, EachFaultChangesItsMinimalCaseAsOnTheCpu) {
  KVCHECK_REQUIRE_GPU();
  ASSERT_EQ(minimal_cases().size(), size_t(kFaultCount));
  for (const MinimalCase& m : minimal_cases()) {
    if (m.cpu_only()) continue;  // q8_0 K/V: CPU only (docs/OPERATIONS.md)
    const std::string name(fault_name(m.fault));
    const Outcome correct = run(m, FaultSet(), true);
    const Outcome faulty = run(m, FaultSet(m.fault), true);
    ASSERT_EQ(correct.index(), m.fault == Fault::kCapacityWraps ? 1u : 0u)
        << name << ": the correct engine must "
        << (m.fault == Fault::kCapacityWraps ? "refuse" : "run") << " the case";
    EXPECT_FALSE(same(correct, faulty)) << name << " left its minimal case unchanged on the GPU";
    expect_same_behaviour(correct, run(m, FaultSet(), false), name + " (correct engines)");
    expect_same_behaviour(faulty, run(m, FaultSet(m.fault), false), name + " (faulty engines)");
  }
}

TEST(CudaFaults, EachFaultIsSilentOnAOneTokenCaseItCannotAffect) {
  KVCHECK_REQUIRE_GPU();
  MinimalCase lone{Fault::kCount, Family::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}})}};
  const Outcome correct = run(lone, FaultSet(), true);
  for (int i = 0; i < kFaultCount; ++i) {
    const Fault f = static_cast<Fault>(i);
    if (f == Fault::kKvSwapped) continue;  // acts on the very first write
    EXPECT_TRUE(same(correct, run(lone, FaultSet(f), true))) << fault_name(f);
  }
}

// ---- errors and memory ------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return std::string(e.what());
  }
  return "(no error)";
}

TEST(CudaErrors, SameRefusalsAsTheCpuEngineAndStateUntouched) {
  KVCHECK_REQUIRE_GPU();
  Config c = llama_tiny();
  c.max_pos = 64;
  const Weights w = init_weights(c, 5);
  EngineOptions o;
  o.capacity = 16;
  o.max_rows = 2;
  auto gpu = make_cuda_engine(c, w, o);
  auto cpu = make_cpu_engine(c, w, o);
  for (Engine* e : {gpu.get(), cpu.get()}) {
    const SequenceId a = e->start();
    e->start();
    feed(*e, a, random_tokens(1, 10, c.vocab), {10});
  }
  const std::vector<int32_t> seven = random_tokens(2, 7, c.vocab), bad = {3, 64}, ok = {1, 2};
  const auto misuse = [&](Engine& e) {
    std::vector<std::string> messages;
    std::vector<float> logits;
    const BatchEntry over[] = {{1, std::span<const int32_t>(ok).first(1)}, {0, seven}};
    messages.push_back(error_of([&] { e.step(over, logits); }));
    messages.push_back(error_of([&] { e.start(); }));
    const BatchEntry twice[] = {{1, ok}, {1, ok}};
    messages.push_back(error_of([&] { e.step(twice, logits); }));
    const BatchEntry bad_token[] = {{1, bad}};
    messages.push_back(error_of([&] { e.step(bad_token, logits); }));
    messages.push_back(error_of([&] { e.finish(42); }));
    messages.push_back(error_of([&] { e.cache(0, c.n_layers); }));
    return messages;
  };
  EXPECT_EQ(misuse(*gpu), misuse(*cpu));
  EXPECT_EQ(gpu->length(0), 10);
  EXPECT_EQ(gpu->length(1), 0);
}

TEST(CudaErrors, BadOptionsAreInputErrors) {
  // Option checks run before any CUDA call, so this runs without a device.
  Config c = llama_tiny();
  c.max_pos = 64;
  const Weights w = init_weights(c, 5);
  EngineOptions o;
  o.capacity = 65;
  try {
    make_cuda_engine(c, w, o);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "capacity: 65 is out of range [1, max_pos 64]");
  }
  Config wide = c;
  wide.head_dim = 258, wide.n_heads = 2, wide.n_kv_heads = 2;
  try {
    EngineOptions fits;
    fits.capacity = 16;
    make_cuda_engine(wide, init_weights(wide, 5), fits);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "head_dim: 258 exceeds the CUDA engine's limit of 256");
  }
  // The storage options: the CPU engine's checks and messages.
  EngineOptions bad_block;
  bad_block.capacity = 16;
  bad_block.block_size = 33;
  EngineOptions prefix_without_pages = bad_block;
  prefix_without_pages.block_size = 0;
  prefix_without_pages.prefix_cache = true;
  for (const EngineOptions& o : {bad_block, prefix_without_pages}) {
    std::string cpu_error;
    try {
      make_cpu_engine(c, w, o);
    } catch (const InputError& e) {
      cpu_error = e.what();
    }
    ASSERT_NE(cpu_error, "");
    try {
      make_cuda_engine(c, w, o);
      ADD_FAILURE() << "no InputError for " << cpu_error;
    } catch (const InputError& e) {
      EXPECT_EQ(e.what(), cpu_error);
    }
  }
}

TEST(CudaErrors, NoDeviceIsAClearDeviceError) {
  if (cuda_device_available()) GTEST_SKIP() << "a device is present";
  const Config c = llama_tiny();
  try {
    make_cuda_engine(c, init_weights(c, 1), EngineOptions{});
    ADD_FAILURE() << "no EngineError";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kDevice);
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaMemory, OutOfDeviceMemoryNamesTheBytes) {
  KVCHECK_REQUIRE_GPU();
  Config c = llama_tiny();
  c.n_layers = 64, c.d_model = 16, c.n_heads = 8, c.n_kv_heads = 8, c.head_dim = 128;
  c.d_ff = 16, c.vocab = 16, c.max_pos = 4096;
  EngineOptions o;
  o.capacity = 4096;
  o.max_rows = 4096;  // K alone: 64*4096*4096*8*128*4 bytes = 4 TiB
  const uint64_t k_bytes = 64ull * 4096 * 4096 * 8 * 128 * 4;
  try {
    make_cuda_engine(c, init_weights(c, 1), o);
    ADD_FAILURE() << "no EngineError";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kDevice);
    const std::string message = e.what();
    EXPECT_NE(message.find("out of device memory"), std::string::npos) << message;
    EXPECT_NE(message.find("requested " + std::to_string(k_bytes) + " bytes"), std::string::npos)
        << message;
  }
  // The device is still usable afterwards.
  EXPECT_NO_THROW(make_cuda_engine(llama_tiny(), init_weights(llama_tiny(), 1), EngineOptions{}));
}

TEST(CudaMemory, KvBytesEqualTheFormulaExactly) {
  KVCHECK_REQUIRE_GPU();
  for (const ModelCase& m : model_cases()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16}) {
      EngineOptions o;
      o.capacity = 40;
      o.max_rows = 3;
      o.kv_dtype = dtype;
      auto engine = make_cuda_engine(m.config, init_weights(m.config, 1), o);
      EXPECT_EQ(engine->memory().kv_bytes,
                kv_cache_bytes(m.config.n_layers, 3, 40, m.config.n_kv_heads, m.config.head_dim,
                               kv_dtype_bytes(dtype)))
          << m.name << " " << kv_dtype_name(dtype);
      EXPECT_GT(engine->memory().weight_bytes, 0u);
    }
  }
}

}  // namespace
}  // namespace kvcheck::test
