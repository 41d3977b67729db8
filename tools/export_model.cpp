// kvcheck-export: writes the seeded weights of a config as a safetensors file
// (Hugging Face names and layouts), a GGUF file (llama.cpp's) or an ONNX
// graph (ONNX Runtime's GroupQueryAttention, model/onnx_model.h), so outside
// tools such as tools/reference_torch.py, llama.cpp and ONNX Runtime can run
// exactly the model the harness runs.
//
//   kvcheck-export --family llama --n-kv-heads 2 --seed 7 --out model.safetensors
//   kvcheck-export --config config.json --vocab 256 --out model.gguf
//   kvcheck-export --from model.safetensors --out model.gguf
//   kvcheck-export --from model.safetensors --out model.onnx
//
// --from converts a file kvcheck wrote (config in its __metadata__) instead of
// seeding weights: the llama.cpp and ONNX Runtime adapters turn the
// safetensors folder of the engine protocol into GGUF or ONNX with it, so each
// layout has one writer. The format follows the --out extension (.gguf, .onnx,
// else safetensors) unless --format says; onnx needs a build with libonnx-dev. Prints the config it
// wrote as one line of JSON on stdout. Exit codes: 0 written, 1 the write failed, 2 bad input.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/config_json.h"
#include "model/gguf.h"
#if KVCHECK_HAVE_ONNX
#include "model/onnx_model.h"
#endif
#include "model/safetensors.h"
#include "model/weights.h"

namespace {

// The config in a JSON file, every field present (config_from_json).
kvcheck::Result<kvcheck::Config> read_config_file(const std::string& path) {
  using R = kvcheck::Result<kvcheck::Config>;
  std::ifstream in(path);
  if (!in) return R::failure(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  const kvcheck::Result<nlohmann::json> json = kvcheck::parse_json_text(text.str(), path);
  if (!json) return R::failure(json.error());
  R config = kvcheck::config_from_json(json.value());
  if (!config.ok()) return R::failure(path + ": " + config.error());
  return config;
}

// The format an --out path names by its extension.
std::string format_of(const std::string& path) {
  if (path.ends_with(".gguf")) return "gguf";
  if (path.ends_with(".onnx")) return "onnx";
  return "safetensors";
}

// Why `format` cannot hold this config, or empty.
std::string unsupported(const std::string& format, const kvcheck::Config& config) {
  if (format == "gguf") {
    const std::string why = kvcheck::gguf_unsupported(config);
    return why.empty() ? why : "no GGUF for this config: " + why;
  }
  if (format == "onnx") {
#if KVCHECK_HAVE_ONNX
    const std::string why = kvcheck::onnx_unsupported(config);
    return why.empty() ? why : "no ONNX graph for this config: " + why;
#else
    return "--format onnx: this kvcheck-export was built without ONNX's schema "
           "(install libonnx-dev and libprotobuf-dev, then reconfigure)";
#endif
  }
  return {};
}

std::string save(const std::string& format, const std::string& path, const kvcheck::Config& config,
                 const kvcheck::Weights& weights, bool packed_qkv) {
  if (format == "gguf") return kvcheck::save_gguf_file(path, config, weights);
#if KVCHECK_HAVE_ONNX
  if (format == "onnx") return kvcheck::save_onnx_file(path, config, weights, {packed_qkv});
#else
  (void)packed_qkv;  // only an ONNX file has packed QKV; unsupported() refused onnx
#endif
  return kvcheck::save_safetensors_file(path, config, weights);
}

}  // namespace

int main(int argc, char** argv) {
  using kvcheck::Config;
  CLI::App app{"Write init_weights(config, seed) as a safetensors file"};
  app.footer(
      "Fields not given take --config's values, else the family's tiny preset (gpt2_tiny, "
      "llama_tiny).");

  // --family picks the family's tiny preset first, so `--family llama` alone
  // is a valid model and each flag changes one field of it.
  std::string family = "gpt2";
  std::string out_path;
  std::string format;
  std::string config_path;
  std::string from_path;
  uint64_t seed = 1;
  Config flags;
  app.add_option("--family", family, "gpt2 or llama")->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--out", out_path, "file to write")->required();
  app.add_option("--format", format,
                 "safetensors, gguf or onnx (default: by the --out extension, else safetensors)")
      ->check(CLI::IsMember({"safetensors", "gguf", "onnx"}));
  app.add_option("--config", config_path, "JSON file holding a whole config (as case files do)")
      ->excludes("--family");
  app.add_option("--from", from_path,
                 "safetensors file written by kvcheck: convert its config and weights")
      ->excludes("--family")
      ->excludes("--config");
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
  bool packed_qkv = false;
  app.add_flag("--packed-qkv", packed_qkv,
               "onnx only: one Q|K|V projection, GroupQueryAttention's packed input");
  CLI11_PARSE(app, argc, argv);

  Config config = family == "llama" ? kvcheck::llama_tiny() : kvcheck::gpt2_tiny();
  if (!config_path.empty()) {
    kvcheck::Result<Config> from_file = read_config_file(config_path);
    if (!from_file.ok()) {
      std::cerr << "kvcheck-export: --config " << from_file.error() << "\n";
      return 2;
    }
    config = from_file.value();
  }
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
  kvcheck::Weights weights;
  if (!from_path.empty()) {
    // The file is the model: a changed field or seed would not match its tensors.
    for (const char* name :
         {"--seed", "--n-layers", "--d-model", "--n-heads", "--n-kv-heads", "--head-dim", "--d-ff",
          "--vocab", "--max-pos", "--rope-theta", "--norm-eps", "--qkv-bias"}) {
      if (given(name)) {
        std::cerr << "kvcheck-export: " << name << " cannot be combined with --from\n";
        return 2;
      }
    }
    kvcheck::Result<kvcheck::ModelFile> file = kvcheck::load_safetensors_file(from_path);
    if (!file.ok()) {
      std::cerr << "kvcheck-export: --from " << file.error() << "\n";
      return 2;
    }
    config = file.value().config;
    weights = std::move(file.value().weights);
  }

  if (const std::string error = config.validate(); !error.empty()) {
    std::cerr << "kvcheck-export: invalid config: " << error << "\n";
    return 2;
  }
  if (format.empty()) format = format_of(out_path);
  if (packed_qkv && format != "onnx") {
    std::cerr << "kvcheck-export: --packed-qkv is for --format onnx only\n";
    return 2;
  }
  if (const std::string why = unsupported(format, config); !why.empty()) {
    std::cerr << "kvcheck-export: " << why << "\n";
    return 2;
  }
  if (from_path.empty()) weights = kvcheck::init_weights(config, seed);
  const std::string error = save(format, out_path, config, weights, packed_qkv);
  if (!error.empty()) {
    std::cerr << "kvcheck-export: " << error << "\n";
    return 1;
  }
  std::cout << kvcheck::config_to_json(config).dump() << "\n";
  return 0;
}
