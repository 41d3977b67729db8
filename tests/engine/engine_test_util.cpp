#include "tests/engine/engine_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/rng.h"
#include "oracle/oracle.h"

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

double logit_bound(const Config& config, KvDtype dtype, int n_keys) {
  // Each layer chains a norm (length E), a projection (E), attention over
  // n_keys, the output projection (H*D) and the MLP (E then F). A float32 dot
  // product of length n is within gamma_n = n*u of its exact value relative to
  // the sum of |terms|; the norms keep activations O(1), so per-layer errors
  // add. The factor 8 covers the conditioning of softmax and the norms
  // (|d softmax| <= 1/2, rsqrt doubling), and cached K/V add one storage
  // rounding each per layer, amplified by the same chain.
  const double u = 0x1p-24;
  const double chain = double(config.d_model) * 3 + config.q_width() + config.d_ff + n_keys;
  const double per_layer = 8.0 * chain * u + 8.0 * kv_dtype_unit_roundoff(dtype);
  return (config.n_layers + 1) * per_layer;
}

void expect_matches_oracle(const Config& config, const Weights& weights, KvDtype dtype,
                           const std::vector<int32_t>& tokens, const std::vector<float>& logits,
                           const std::string& context) {
  const oracle::Output ref = oracle::forward(config, weights, tokens);
  ASSERT_EQ(logits.size(), ref.logits.size()) << context;
  double max_ref = 1.0, max_err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(ref.logits[i]));
    const double err = std::abs(double(logits[i]) - ref.logits[i]);
    if (!(err <= max_err)) max_err = err, worst = i;  // NaN counts as worst
  }
  const double bound = logit_bound(config, dtype, static_cast<int>(tokens.size()));
  const double ratio = max_err / max_ref / bound;
  EXPECT_LE(ratio, 1.0) << context << ": error/bound " << ratio << ", worst at token "
                        << worst / size_t(config.vocab) << " vocab " << worst % size_t(config.vocab)
                        << ": engine " << logits[worst] << " oracle " << ref.logits[worst];
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

}  // namespace kvcheck::test
