// llama.cpp against the oracle: for each case a config and seed are written as
// GGUF (save_gguf), adapters/llama.cpp/probe_logits.mjs runs a token sequence
// through llama.cpp (f32 K/V, flash attention off, one thread) whole and token
// by token, and every logit is compared with oracle::forward.
//
//   logits_vs_oracle ADAPTER_DIR [SEEDS]
//
// SEEDS (default 3) weight seeds per llama shape. A logit passes when
// |llama.cpp - oracle| <= the bound derive_error_bounds gives the in-tree f32
// engine (docs/TOLERANCE.md); docs/LLAMA_CPP.md says why that bound is used
// for llama.cpp and what margin it keeps. The gpt2 cases are reported, not
// judged: llama.cpp evaluates GELU through an f16 table (docs/LLAMA_CPP.md).
// Exit codes: 0 all held, 1 a logit was out of bounds or llama.cpp failed,
// 77 skipped (no Node 20, or the adapter's node_modules is not installed).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
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
  bool judged;  // false: measured and reported only
};

Config llama(int n_heads, int n_kv_heads, int head_dim) {
  Config c = kvcheck::llama_tiny();
  c.vocab = 256;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  return c;
}

std::vector<Case> cases(uint64_t seeds) {
  std::vector<Case> out;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    out.push_back({"llama MHA", llama(4, 4, 8), seed, 32, true});
    out.push_back({"llama GQA", llama(4, 2, 8), seed, 32, true});
    out.push_back({"llama MQA", llama(4, 1, 8), seed, 32, true});
  }
  out.push_back({"llama H*D != E", llama(4, 2, 16), seeds + 1, 32, true});
  Config gpt2 = kvcheck::gpt2_tiny();
  gpt2.vocab = 256;
  out.push_back({"gpt2 MHA", gpt2, 1, 32, false});
  gpt2.n_kv_heads = 2;
  out.push_back({"gpt2 GQA", gpt2, 2, 32, false});
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

// Why the llama.cpp tests cannot run here, or empty.
std::string skip_reason(const fs::path& adapter) {
  bool ok = false;
  const std::string version = run("node --version 2>/dev/null", &ok);
  if (!ok || version.size() < 2 || version[0] != 'v') {
    return "node is not on PATH (Node 20 or newer is needed; ci/setup says how to install it)";
  }
  if (std::stoi(version.substr(1)) < 20) {
    return "node " + version.substr(0, version.find('\n')) + " is older than 20";
  }
  if (!fs::exists(adapter / "node_modules" / "node-llama-cpp" / "package.json") ||
      !fs::exists(adapter / "node_modules" / "@node-llama-cpp" / "linux-x64")) {
    return (adapter / "node_modules").string() +
           " lacks node-llama-cpp: run ci/setup (or npm ci --omit=optional --ignore-scripts there)";
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
  double max_abs = 0;        // max |llama.cpp - oracle|
  double max_rel = 0;        // max |llama.cpp - oracle| / max |oracle logit| of its row
  double max_ratio = 0;      // max |llama.cpp - oracle| / in-tree bound
  double worst_bitwise = 0;  // max |whole - token by token|, llama.cpp against itself
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

// Runs one case; returns false when llama.cpp failed or a judged logit is out of bounds.
bool check(const Case& c, const fs::path& adapter, const fs::path& dir) {
  const kvcheck::Weights weights = kvcheck::init_weights(c.config, c.seed);
  const fs::path model = dir / "model.gguf";
  if (const std::string error = kvcheck::save_gguf_file(model.string(), c.config, weights);
      !error.empty()) {
    std::cout << c.name << " seed " << c.seed << ": " << error << "\n";
    return false;
  }
  const std::vector<int32_t> tokens = random_tokens(c.seed, c.n_tokens, c.config.vocab);
  std::string list;
  for (int32_t t : tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string command = "node " + quoted((adapter / "probe_logits.mjs").string()) +
                              " --model " + quoted(model.string()) + " --tokens " + list +
                              " --chunk " + std::to_string(tokens.size()) + ",1";
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
  const auto seeds = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : 3ull;
  if (argc < 2 || argc > 3 || seeds == 0 || seeds > 1000) {
    std::cerr << "usage: logits_vs_oracle ADAPTER_DIR [SEEDS in 1..1000]\n";
    return 2;
  }
  const fs::path adapter = argv[1];
  if (const std::string why = skip_reason(adapter); !why.empty()) {
    std::cout << "SKIPPED: llama.cpp tests: " << why << "\n";
    return kSkip;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("kvcheck-llama-cpp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int failed = 0;
  for (const Case& c : cases(seeds)) failed += check(c, adapter, dir) ? 0 : 1;
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::cout << (failed == 0 ? "all cases held" : std::to_string(failed) + " case(s) failed")
            << "\n";
  return failed == 0 ? 0 : 1;
}
