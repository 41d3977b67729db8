// A real engine's model file against the oracle: for each case a config and
// seed are written in the engine's format (GGUF for llama.cpp, ONNX for ONNX
// Runtime), the adapter's probe_logits.mjs runs a token sequence through the
// engine (f32 K/V, one thread) whole and token by token, and every logit is
// compared with oracle::forward. This is how every model file kvcheck writes
// for an engine is validated before any cache property runs.
//
//   logits_vs_oracle ENGINE ADAPTER_DIR [SEEDS]      ENGINE: llama.cpp | onnxruntime
//
// SEEDS (default 3) weight seeds per llama shape. A logit passes when
// |engine - oracle| <= the bound derive_error_bounds gives the in-tree f32
// engine (docs/TOLERANCE.md); docs/LLAMA_CPP.md and docs/ONNXRUNTIME.md say
// why that bound is used and what margin it keeps. llama.cpp's gpt2 cases are
// reported, not judged: it evaluates GELU through an f16 table.
// Exit codes: 0 all held, 1 a logit was out of bounds or the engine failed,
// 2 bad arguments, 77 skipped (no Node 20, the adapter's node_modules is not
// installed, or kvcheck was built without the ONNX writer).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "model/gguf.h"
#if KVCHECK_HAVE_ONNX
#include "model/onnx_model.h"
#endif
#include "model/rng.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"

namespace {

namespace fs = std::filesystem;
using kvcheck::Config;

constexpr int kSkip = 77;

struct Case {
  std::string name;
  Config config;
  uint64_t seed;
  int n_tokens;
  bool judged;          // false: measured and reported only
  bool packed = false;  // ONNX only: Q|K|V in one projection (GroupQueryAttention's packed input)
};

Config llama(int n_heads, int n_kv_heads, int head_dim) {
  Config c = kvcheck::llama_tiny();
  c.vocab = 256;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  return c;
}

// What differs between the engines this test knows.
struct Engine {
  std::string name;     // llama.cpp | onnxruntime
  std::string package;  // node_modules/<package>/package.json must exist
  int head_dim;         // the llama cases' head_dim (ONNX Runtime's rotary needs 16s)
  bool gpt2_judged;     // false: gpt2 is reported only
};

Engine engine_named(const std::string& name) {
  if (name == "llama.cpp") return {name, "node-llama-cpp", 8, false};
  if (name == "onnxruntime") return {name, "onnxruntime-node", 16, true};
  return {};
}

std::vector<Case> cases(const Engine& engine, uint64_t seeds) {
  std::vector<Case> out;
  const int d = engine.head_dim;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    out.push_back({"llama MHA", llama(4, 4, d), seed, 32, true});
    out.push_back({"llama GQA", llama(4, 2, d), seed, 32, true});
    out.push_back({"llama MQA", llama(4, 1, d), seed, 32, true});
  }
  out.push_back({"llama H*D != E", llama(4, 2, 2 * d), seeds + 1, 32, true});
  Config gpt2 = kvcheck::gpt2_tiny();
  gpt2.vocab = 256;
  out.push_back({"gpt2 MHA", gpt2, 1, 32, engine.gpt2_judged});
  gpt2.n_kv_heads = 2;
  out.push_back({"gpt2 GQA", gpt2, 2, 32, engine.gpt2_judged});
  if (engine.name == "onnxruntime") {
    out.push_back({"llama GQA packed", llama(4, 2, d), 1, 32, true, true});
    gpt2.qkv_bias = true;
    out.push_back({"gpt2 bias packed", gpt2, 3, 32, true, true});
  }
  return out;
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The command's standard output; empty with *ok = false when it failed.
std::string run(const std::string& command, bool* ok) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *ok = false;
    return out;
  }
  std::array<char, 65536> buffer;
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  *ok = ::pclose(pipe) == 0;
  return out;
}

// Why this engine's tests cannot run here, or empty.
std::string skip_reason(const Engine& engine, const fs::path& adapter) {
#if !KVCHECK_HAVE_ONNX
  if (engine.name == "onnxruntime")
    return "kvcheck was built without the ONNX writer (libonnx-dev, libprotobuf-dev; see ci/setup)";
#endif
  bool ok = false;
  const std::string version = run("node --version 2>/dev/null", &ok);
  if (!ok || version.size() < 2 || version[0] != 'v') {
    return "node is not on PATH (Node 20 or newer is needed; ci/setup says how to install it)";
  }
  if (std::stoi(version.substr(1)) < 20) {
    return "node " + version.substr(0, version.find('\n')) + " is older than 20";
  }
  if (!fs::exists(adapter / "node_modules" / engine.package / "package.json") ||
      (engine.name == "llama.cpp" &&
       !fs::exists(adapter / "node_modules" / "@node-llama-cpp" / "linux-x64"))) {
    return (adapter / "node_modules").string() + " lacks " + engine.package +
           ": run ci/setup (or npm ci --omit=optional --ignore-scripts there)";
  }
  return {};
}

std::vector<int32_t> random_tokens(uint64_t seed, int n, int vocab) {
  kvcheck::SplitMix64 rng(seed ^ 0x746f6b656e73ull);  // "tokens"
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return tokens;
}

struct Errors {
  double max_abs = 0;        // max |engine - oracle|
  double max_rel = 0;        // max |engine - oracle| / max |oracle logit| of its row
  double max_ratio = 0;      // max |engine - oracle| / in-tree bound
  double worst_bitwise = 0;  // max |whole - token by token|, the engine against itself
};

// Compares one run's logits [T][V] with the oracle's.
void compare(const nlohmann::json& rows, const kvcheck::oracle::Output& oracle,
             const kvcheck::ErrorBounds& bounds, int vocab, Errors& e) {
  for (int t = 0; t < oracle.n_tokens; ++t) {
    double row_max = 0;
    for (int v = 0; v < vocab; ++v)
      row_max = std::max(row_max, std::abs(oracle.logit(t, v, vocab)));
    for (int v = 0; v < vocab; ++v) {
      const double got = rows.at(static_cast<size_t>(t)).at(static_cast<size_t>(v)).get<double>();
      const double diff = std::abs(got - oracle.logit(t, v, vocab));
      const double bound = bounds.logits[static_cast<size_t>(t) * vocab + v];
      e.max_abs = std::max(e.max_abs, diff);
      e.max_rel = std::max(e.max_rel, diff / row_max);
      e.max_ratio = std::max(e.max_ratio, diff / bound);
    }
  }
}

// Writes the case's model as the engine reads it; returns the probe's
// model argument, or empty after printing why it failed.
std::string write_model(const Engine& engine, const Case& c, const kvcheck::Weights& weights,
                        const fs::path& dir) {
  std::string error;
  std::string argument;
  if (engine.name == "llama.cpp") {
    error = kvcheck::save_gguf_file((dir / "model.gguf").string(), c.config, weights);
    argument = " --model " + quoted((dir / "model.gguf").string());
  } else {
#if KVCHECK_HAVE_ONNX
    error = kvcheck::save_onnx_file((dir / "model.onnx").string(), c.config, weights, {c.packed});
    std::ofstream((dir / "config.json").string()) << kvcheck::config_to_json(c.config).dump();
#endif
    argument = " --dir " + quoted(dir.string());
  }
  if (!error.empty()) {
    std::cout << c.name << " seed " << c.seed << ": " << error << "\n";
    return {};
  }
  return argument;
}

// Runs one case; returns false when the engine failed or a judged logit is out of bounds.
bool check(const Engine& engine, const Case& c, const fs::path& adapter, const fs::path& dir) {
  const kvcheck::Weights weights = kvcheck::init_weights(c.config, c.seed);
  const std::string model = write_model(engine, c, weights, dir);
  if (model.empty()) return false;
  const std::vector<int32_t> tokens = random_tokens(c.seed, c.n_tokens, c.config.vocab);
  std::string list;
  for (int32_t t : tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string command = "node " + quoted((adapter / "probe_logits.mjs").string()) + model +
                              " --tokens " + list + " --chunk " + std::to_string(tokens.size()) +
                              ",1";
  bool ok = false;
  const std::string output = run(command, &ok);
  const nlohmann::json probe = nlohmann::json::parse(output, nullptr, false);
  if (!ok || probe.is_discarded() || !probe.contains("runs")) {
    std::cout << c.name << " seed " << c.seed << ": probe failed: " << command << "\n";
    return false;
  }
  const auto oracle = kvcheck::oracle::forward(c.config, weights, tokens);
  const auto bounds =
      kvcheck::derive_error_bounds(c.config, weights, tokens, kvcheck::KvDtype::kF32);
  Errors e;
  for (const nlohmann::json& r : probe.at("runs"))
    compare(r.at("logits"), oracle, bounds, c.config.vocab, e);
  const nlohmann::json& whole = probe.at("runs").at(0).at("logits");
  const nlohmann::json& steps = probe.at("runs").at(1).at("logits");
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (size_t v = 0; v < static_cast<size_t>(c.config.vocab); ++v) {
      e.worst_bitwise = std::max(e.worst_bitwise,
                                 std::abs(whole[t][v].get<double>() - steps[t][v].get<double>()));
    }
  }
  const bool held = !c.judged || e.max_ratio <= 1.0;
  std::printf(
      "%-16s H=%d KVH=%d D=%-2d seed %llu T=%d  max|d| %.3g  max rel %.3g  "
      "error/bound %.3g  whole vs token-by-token %.3g  %s\n",
      c.name.c_str(), c.config.n_heads, c.config.n_kv_heads, c.config.head_dim,
      static_cast<unsigned long long>(c.seed), c.n_tokens, e.max_abs, e.max_rel, e.max_ratio,
      e.worst_bitwise, c.judged ? (held ? "ok" : "OUT OF BOUNDS") : "(reported)");
  return held;
}

}  // namespace

int main(int argc, char** argv) {
  const auto seeds = argc == 4 ? std::strtoull(argv[3], nullptr, 10) : 3ull;
  const Engine engine = engine_named(argc >= 2 ? argv[1] : "");
  if (argc < 3 || argc > 4 || seeds == 0 || seeds > 1000 || engine.name.empty()) {
    std::cerr << "usage: logits_vs_oracle llama.cpp|onnxruntime ADAPTER_DIR [SEEDS in 1..1000]\n";
    return 2;
  }
  const fs::path adapter = argv[2];
  if (const std::string why = skip_reason(engine, adapter); !why.empty()) {
    std::cout << "SKIPPED: " << engine.name << " tests: " << why << "\n";
    return kSkip;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("kvcheck-" + engine.name + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int failed = 0;
  for (const Case& c : cases(engine, seeds)) failed += check(engine, c, adapter, dir) ? 0 : 1;
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::cout << (failed == 0 ? "all cases held" : std::to_string(failed) + " case(s) failed")
            << "\n";
  return failed == 0 ? 0 : 1;
}
