// kvcheck-export: writes the seeded weights of a config as a safetensors file
// (Hugging Face names and layouts), so outside tools such as
// tools/reference_torch.py can run exactly the model the harness runs.
//
//   kvcheck-export --family llama --n-kv-heads 2 --seed 7 --out model.safetensors
//
// Prints the config it wrote as one line of JSON on stdout.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <iostream>
#include <string>

#include "model/config.h"
#include "model/config_json.h"
#include "model/safetensors.h"
#include "model/weights.h"

int main(int argc, char** argv) {
  using kvcheck::Config;
  CLI::App app{"Write init_weights(config, seed) as a safetensors file"};
  app.footer("Fields not given take the family's tiny preset (gpt2_tiny, llama_tiny).");

  // --family picks the family's tiny preset first, so `--family llama` alone
  // is a valid model and each flag changes one field of it.
  std::string family = "gpt2";
  std::string out_path;
  uint64_t seed = 1;
  Config flags;
  app.add_option("--family", family, "gpt2 or llama")->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--out", out_path, "safetensors file to write")->required();
  app.add_option("--seed", seed, "64-bit weight seed for init_weights (default 1)");
  app.add_option("--n-layers", flags.n_layers);
  app.add_option("--d-model", flags.d_model);
  app.add_option("--n-heads", flags.n_heads);
  app.add_option("--n-kv-heads", flags.n_kv_heads);
  app.add_option("--head-dim", flags.head_dim);
  app.add_option("--d-ff", flags.d_ff);
  app.add_option("--vocab", flags.vocab);
  app.add_option("--max-pos", flags.max_pos);
  app.add_option("--rope-theta", flags.rope_theta, "llama only");
  app.add_option("--norm-eps", flags.norm_eps);
  app.add_option("--qkv-bias", flags.qkv_bias, "gpt2 only: true or false");
  CLI11_PARSE(app, argc, argv);

  Config config = family == "llama" ? kvcheck::llama_tiny() : kvcheck::gpt2_tiny();
  // Only flags given on the command line override the preset.
  auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("--n-layers")) config.n_layers = flags.n_layers;
  if (given("--d-model")) config.d_model = flags.d_model;
  if (given("--n-heads")) config.n_heads = flags.n_heads;
  if (given("--n-kv-heads")) config.n_kv_heads = flags.n_kv_heads;
  if (given("--head-dim")) config.head_dim = flags.head_dim;
  if (given("--d-ff")) config.d_ff = flags.d_ff;
  if (given("--vocab")) config.vocab = flags.vocab;
  if (given("--max-pos")) config.max_pos = flags.max_pos;
  if (given("--rope-theta")) config.rope_theta = flags.rope_theta;
  if (given("--norm-eps")) config.norm_eps = flags.norm_eps;
  if (given("--qkv-bias")) config.qkv_bias = flags.qkv_bias;

  if (const std::string error = config.validate(); !error.empty()) {
    std::cerr << "kvcheck-export: invalid config: " << error << "\n";
    return 2;
  }
  const kvcheck::Weights weights = kvcheck::init_weights(config, seed);
  if (const std::string error = kvcheck::save_safetensors_file(out_path, config, weights);
      !error.empty()) {
    std::cerr << "kvcheck-export: " << error << "\n";
    return 1;
  }
  std::cout << kvcheck::config_to_json(config).dump() << "\n";
  return 0;
}
