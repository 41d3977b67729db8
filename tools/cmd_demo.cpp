// `kvcheck demo`: a seeded model of each family, the oracle and the CPU
// engine on one prompt; prints the logits' shape, a few values per position
// and the engine's largest deviation from the oracle.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cpu/cpu_engine.h"
#include "model/rng.h"
#include "oracle/oracle.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"

namespace kvcheck::cli {

namespace {

int run_demo(uint64_t seed, int n_tokens) {
  std::printf("kvcheck demo: weight seed %llu, %d tokens\n", (unsigned long long)seed, n_tokens);
  for (Config config : {gpt2_tiny(), llama_tiny()}) {
    const Weights weights = init_weights(config, seed);
    SplitMix64 rng(seed + 1);
    std::vector<int32_t> tokens;
    for (int i = 0; i < n_tokens; ++i) tokens.push_back(int32_t(rng.below(uint64_t(config.vocab))));
    const oracle::Output ref = oracle::forward(config, weights, tokens);
    std::printf("\n%s: %d layers, d_model %d, %d heads, %d kv heads, head_dim %d, vocab %d\n",
                family_name(config.family), config.n_layers, config.d_model, config.n_heads,
                config.n_kv_heads, config.head_dim, config.vocab);
    std::printf("oracle logits: [%d][%d]\n", ref.n_tokens, config.vocab);
    for (int t = 0; t < ref.n_tokens; ++t) {
      std::printf("  pos %2d token %3d:", t, tokens[size_t(t)]);
      for (int v = 0; v < 4; ++v) std::printf(" %+.6f", ref.logit(t, v, config.vocab));
      std::printf(" ...\n");
    }
    EngineOptions options;
    options.capacity = std::min(config.max_pos, 256);
    auto engine = make_cpu_engine(config, weights, options);
    const SequenceId s = engine->start();
    std::vector<float> logits, all;
    // Prefill half, decode the rest one token at a time.
    const size_t half = tokens.size() / 2;
    const BatchEntry prefill{s, std::span<const int32_t>(tokens).first(half)};
    engine->step(std::span<const BatchEntry>(&prefill, 1), logits);
    all = logits;
    for (size_t t = half; t < tokens.size(); ++t) {
      const BatchEntry decode{s, std::span<const int32_t>(tokens).subspan(t, 1)};
      engine->step(std::span<const BatchEntry>(&decode, 1), logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    double worst = 0;
    for (size_t i = 0; i < all.size(); ++i)
      worst = std::max(worst, std::abs(all[i] - ref.logits[i]));
    std::printf("engine (%s, prefill %zu + %zu decodes): max |engine - oracle| = %.3g\n",
                engine->name().c_str(), half, tokens.size() - half, worst);
  }
  return 0;
}

}  // namespace

Action add_demo(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo",
                                 "Run a seeded model of each family through the oracle "
                                 "and the CPU engine and print their logits");
  auto seed = std::make_shared<uint64_t>(1);
  auto tokens = std::make_shared<int>(12);
  cmd->add_option("--seed", *seed, "weight seed")->check(seed_number())->capture_default_str();
  cmd->add_option("--tokens", *tokens, "prompt length")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  return [cmd, seed, tokens]() { return cmd->parsed() ? run_demo(*seed, *tokens) : -1; };
}

}  // namespace kvcheck::cli
