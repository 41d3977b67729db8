#include "tools/backends.h"

#include "model/status.h"
#include "properties/runner.h"

namespace kvcheck::cli {

std::vector<Backend> available_backends() {
  return {
      {"cpu", [](FaultSet f) { return cpu_engine_factory(f, KernelPath::kOptimized); }},
      {"cpu-reference", [](FaultSet f) { return cpu_engine_factory(f, KernelPath::kReference); }},
  };
}

std::vector<Backend> chosen_backends(const std::vector<std::string>& names) {
  const std::vector<Backend> all = available_backends();
  if (names.empty()) return all;
  std::vector<Backend> out;
  for (const std::string& name : names) {
    bool found = false;
    for (const Backend& b : all) {
      if (b.name == name) out.push_back(b), found = true;
    }
    if (found) continue;
    if (name == "cuda") {
      throw InputError(
          "--backend: cuda is not available in this build (the CUDA engine is not "
          "built yet; see issue 7)");
    }
    throw InputError("--backend: unknown backend \"" + name + "\" (available: cpu, cpu-reference)");
  }
  return out;
}

}  // namespace kvcheck::cli
