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

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Each config field as a flag (--n-kv-heads for n_kv_heads), from the one
// table of config fields, so a field added there is a flag here too.
struct FieldFlags {
  std::map<std::string, std::string> text;                    // field -> the flag's text
  std::vector<std::pair<std::string, CLI::Option*>> options;  // field, its flag
};

void add_field_flags(CLI::App& app, FieldFlags& flags) {
  const std::map<std::string_view, const char*> notes = {{"rope_theta", "llama only"},
                                                         {"qkv_bias", "gpt2 only: true or false"}};
  for (const std::string_view name : kvcheck::config_field_names()) {
    if (name == "family") continue;  // --family picks a preset, below
    std::string flag = "--" + std::string(name);
    std::replace(flag.begin(), flag.end(), '_', '-');
    const auto note = notes.find(name);
    flags.options.emplace_back(
        std::string(name),
        app.add_option(flag, flags.text[std::string(name)], note == notes.end() ? "" : note->second)
            ->type_name("VALUE"));
  }
}

// `config` with the given flags' fields replaced, each flag's text taken as
// the JSON value it spells (4, 1e4, true), else as a string, so that
// config_from_json names the field and the value it refuses.
kvcheck::Result<kvcheck::Config> with_flags(const kvcheck::Config& config,
                                            const FieldFlags& flags) {
  nlohmann::json fields = kvcheck::config_to_json(config);
  for (const auto& [name, option] : flags.options) {
    if (option->count() == 0) continue;
    const std::string& text = flags.text.at(name);
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    fields[name] = value.is_discarded() ? nlohmann::json(text) : value;
  }
  return kvcheck::config_from_json(fields);
}

// The config the flags describe: --from's file, else --config's, else the
// family's tiny preset, then each field flag given. Weights come with --from.
kvcheck::Result<kvcheck::Config> chosen_config(const std::string& family,
                                               const std::string& config_path,
                                               const std::string& from_path,
                                               const FieldFlags& flags, kvcheck::Weights& weights) {
  using R = kvcheck::Result<kvcheck::Config>;
  if (!from_path.empty()) {
    kvcheck::Result<kvcheck::ModelFile> file = kvcheck::load_safetensors_file(from_path);
    if (!file.ok()) return R::failure("--from " + file.error());
    weights = std::move(file.value().weights);
    return file.value().config;
  }
  kvcheck::Config config = family == "llama" ? kvcheck::llama_tiny() : kvcheck::gpt2_tiny();
  if (!config_path.empty()) {
    R from_file = read_config_file(config_path);
    if (!from_file.ok()) return R::failure("--config " + from_file.error());
    config = from_file.value();
  }
  return with_flags(config, flags);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write init_weights(config, seed) as a safetensors file"};
  app.footer(
      "Fields not given take --config's values, else the family's tiny preset (gpt2_tiny, "
      "llama_tiny). Exit codes: 0 written, 1 the write failed, 2 bad input.");

  // --family picks the family's tiny preset first, so `--family llama` alone
  // is a valid model and each flag changes one field of it.
  std::string family = "gpt2";
  std::string out_path;
  std::string format;
  std::string config_path;
  std::string from_path;
  uint64_t seed = 1;
  app.add_option("--family", family, "gpt2 or llama")->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--out", out_path, "file to write")->required();
  app.add_option("--format", format,
                 "safetensors, gguf or onnx (default: by the --out extension, else safetensors)")
      ->check(CLI::IsMember({"safetensors", "gguf", "onnx"}));
  app.add_option("--config", config_path, "JSON file holding a whole config (as case files do)")
      ->excludes("--family");
  CLI::Option* from = app.add_option(
      "--from", from_path, "safetensors file written by kvcheck: convert its config and weights");
  from->excludes("--family")->excludes("--config");
  // The file is the model: a changed field or seed would not match its tensors.
  from->excludes(app.add_option("--seed", seed, "64-bit weight seed for init_weights (default 1)"));
  FieldFlags field_flags;
  add_field_flags(app, field_flags);
  for (const auto& [name, option] : field_flags.options) from->excludes(option);
  bool packed_qkv = false;
  app.add_flag("--packed-qkv", packed_qkv,
               "onnx only: one Q|K|V projection, GroupQueryAttention's packed input");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; every other refusal is bad input
  }

  kvcheck::Weights weights;
  const kvcheck::Result<kvcheck::Config> chosen =
      chosen_config(family, config_path, from_path, field_flags, weights);
  if (!chosen.ok()) {
    std::cerr << "kvcheck-export: " << chosen.error() << "\n";
    return 2;
  }
  const kvcheck::Config& config = chosen.value();
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
