// `kvcheck backends`: what the registry holds and what each engine declares,
// so a user sees which properties can apply before running any.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backends/registry.h"
#include "engine/arithmetic_presets.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "tools/backends.h"
#include "tools/commands.h"

namespace kvcheck::cli {

namespace {

struct BackendsOptions {
  std::vector<std::string> resolve;  // backend strings to resolve and describe
  bool json = false;
};

int run_backends(const BackendsOptions& o) {
  std::vector<Backend> described;
  std::vector<std::string> unavailable;  // "name: why"
  if (o.resolve.empty()) {
    for (const BackendRegistry::Entry& e : backend_registry().entries()) {
      if (e.is_prefix) continue;
      try {
        described.push_back(backend_registry().resolve(e.name));
      } catch (const InputError& error) {
        unavailable.push_back(e.name + ": " + error.what());
      }
    }
  } else {
    for (const std::string& spec : o.resolve) described.push_back(backend_registry().resolve(spec));
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Backend& b : described) {
      out.push_back({{"backend", b.spec}, {"traits", traits_to_json(b.traits)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (const Backend& b : described) {
    std::printf("%s\n%s\n", b.spec.c_str(), traits_summary(b.traits, "  ").c_str());
  }
  for (const std::string& line : unavailable) std::printf("unavailable here: %s\n\n", line.c_str());
  if (o.resolve.empty()) {
    std::printf("also accepted:\n");
    for (const BackendRegistry::Entry& e : backend_registry().entries()) {
      if (e.is_prefix) std::printf("  %sPATH  %s\n", e.name.c_str(), e.description.c_str());
    }
    std::printf(
        "every backend takes ?invariance=bounded, ?profile=restricted, ?arithmetic=NAME (%s) "
        "and ?kv_dtypes=T,... (docs/ENGINES.md)\n",
        arithmetic_preset_names().c_str());
  }
  return 0;
}

}  // namespace

Action add_backends(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("backends", "List the registered engines and the traits each declares");
  auto o = std::make_shared<BackendsOptions>();
  cmd->add_option("backend", o->resolve,
                  "describe these backend strings instead (e.g. plugin:./libmy.so)");
  cmd->add_flag("--json", o->json, "print the traits as JSON (the form plugins declare)");
  return [cmd, o]() { return cmd->parsed() ? run_backends(*o) : -1; };
}

}  // namespace kvcheck::cli
