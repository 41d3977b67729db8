#include "tests/engine/engine_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/rng.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"

namespace kvcheck::test {

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    for (int kv_heads : {4, 2, 1}) {
      Config c = family == Family::kGpt2 ? gpt2_tiny() : llama_tiny();
      c.n_heads = 4;
      c.n_kv_heads = kv_heads;
      c.max_pos = 64;
      const char* kind = kv_heads == 4 ? "mha" : kv_heads == 1 ? "mqa" : "gqa";
      cases.push_back({std::string(family_name(family)) + "_" + kind, c});
    }
  }
  return cases;
}

std::vector<int32_t> random_tokens(uint64_t seed, int n, int vocab) {
  SplitMix64 rng(seed);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng.below(uint64_t(vocab))));
  return tokens;
}

std::vector<int> random_chunks(uint64_t seed, int n) {
  SplitMix64 rng(seed);
  std::vector<int> chunks;
  while (n > 0) {
    const int len = static_cast<int>(rng.in_range(1, std::min(n, 7)));
    chunks.push_back(len);
    n -= len;
  }
  return chunks;
}

std::vector<float> feed(Engine& engine, SequenceId sequence, const std::vector<int32_t>& tokens,
                        const std::vector<int>& chunks) {
  std::vector<float> all, step_logits;
  size_t at = 0;
  for (int len : chunks) {
    const BatchEntry entry{sequence, std::span<const int32_t>(tokens).subspan(at, size_t(len))};
    engine.step(std::span<const BatchEntry>(&entry, 1), step_logits);
    all.insert(all.end(), step_logits.begin(), step_logits.end());
    at += size_t(len);
  }
  return all;
}

std::vector<float> solo_run(const Config& config, const Weights& weights,
                            const EngineOptions& options, const std::vector<int32_t>& tokens) {
  auto engine = make_cpu_engine(config, weights, options);
  const SequenceId s = engine->start();
  return feed(*engine, s, tokens, {static_cast<int>(tokens.size())});
}

void expect_matches_oracle(const Config& config, const Weights& weights, KvDtype dtype,
                           const std::vector<int32_t>& tokens, const std::vector<float>& logits,
                           const std::string& context) {
  const oracle::Output ref = oracle::forward(config, weights, tokens);
  const ErrorBounds bounds = derive_error_bounds(config, weights, tokens, dtype);
  ASSERT_EQ(logits.size(), ref.logits.size()) << context;
  // Per logit, the derived bound of docs/TOLERANCE.md; NaN and inf fail.
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double ratio = std::abs(double(logits[i]) - ref.logits[i]) / bounds.logits[i];
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio, worst_at = i;
  }
  EXPECT_LE(worst, 1.0) << context << ": error/bound " << worst << " at token "
                        << worst_at / size_t(config.vocab) << " vocab "
                        << worst_at % size_t(config.vocab) << ": engine " << logits[worst_at]
                        << " oracle " << ref.logits[worst_at] << " bound "
                        << bounds.logits[worst_at];
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& context) {
  ASSERT_EQ(a.size(), b.size()) << context;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << context << ": first difference at element " << i << ": " << a[i] << " vs "
                    << b[i];
  }
}

std::vector<uint8_t> cache_bytes(const Engine& e, SequenceId s) {
  std::vector<uint8_t> out;
  for (int l = 0; l < e.config().n_layers; ++l) {
    const CacheSnapshot snap = e.cache(s, l);
    out.insert(out.end(), snap.k.begin(), snap.k.end());
    out.insert(out.end(), snap.v.begin(), snap.v.end());
    for (int32_t p : snap.positions) out.push_back(uint8_t(p));
  }
  return out;
}

}  // namespace kvcheck::test
