#include "backends/registry.h"

#include <algorithm>

#include "backends/exec/exec.h"
#include "backends/in_tree.h"
#include "backends/plugin.h"
#include "engine/arithmetic_presets.h"
#include "model/command_text.h"
#include "model/status.h"

namespace kvcheck {

EngineUnderTest Backend::under_test(FaultSet faults) const {
  EngineUnderTest subject(make_factory(faults), traits);
  subject.backend = spec;
  subject.forces_pool = forces_pool;
  return subject;
}

BackendSpec parse_backend_spec(const std::string& text) {
  BackendSpec spec;
  const size_t question = text.find('?');
  spec.name = text.substr(0, question);
  if (spec.name.empty()) throw InputError("--backend: empty backend name in \"" + text + "\"");
  if (question == std::string::npos) return spec;
  spec.options_text = text.substr(question + 1);
  size_t begin = 0;
  while (begin <= spec.options_text.size()) {
    size_t end = spec.options_text.find('&', begin);
    if (end == std::string::npos) end = spec.options_text.size();
    const std::string pair = spec.options_text.substr(begin, end - begin);
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError("--backend " + text + ": option \"" + pair +
                       "\" is not of the form key=value");
    }
    spec.options[pair.substr(0, eq)] = pair.substr(eq + 1);
    begin = end + 1;
  }
  return spec;
}

void reject_unknown_options(const BackendSpec& spec, const std::vector<std::string>& known) {
  for (const auto& [key, value] : spec.options) {
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == key;
    if (ok) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError("--backend " + spec.name + ": unknown option \"" + key +
                     "\" (known: " + (list.empty() ? "none" : list) +
                     "; every backend also takes invariance=bounded, profile=restricted, "
                     "arithmetic=NAME and kv_dtypes=T,...)");
  }
}

std::string backend_for_case(const std::string& recorded, const std::string& given,
                             const std::string& fallback) {
  if (!given.empty()) return given;
  if (recorded.empty()) return fallback;
  if (backend_runs_named_code(recorded)) {
    throw InputError("the case was seen on backend " + recorded +
                     "; kvcheck never loads a plugin or starts a command named by a case file. "
                     "To run it, pass it yourself: --backend " +
                     shell_quote(recorded));
  }
  return recorded;
}

namespace {

// The generic weakenings: they change what is declared, never the engine.
void apply_generic_options(BackendSpec& spec, EngineTraits& traits) {
  if (auto it = spec.options.find("invariance"); it != spec.options.end()) {
    if (it->second != "bounded") {
      throw InputError("--backend " + spec.name + ": invariance=" + it->second +
                       " (only invariance=bounded weakens a declaration)");
    }
    for (Invariance* i : {&traits.invariance.chunking, &traits.invariance.batch,
                          &traits.invariance.reset, &traits.invariance.compaction,
                          &traits.invariance.gqa_twin, &traits.invariance.determinism,
                          &traits.invariance.sharing, &traits.invariance.rollback}) {
      *i = Invariance::kBounded;
    }
  }
  if (auto it = spec.options.find("profile"); it != spec.options.end()) {
    if (it->second != "restricted") {
      throw InputError("--backend " + spec.name + ": profile=" + it->second +
                       " (the only profile is \"restricted\")");
    }
    traits.operations.cache_snapshot = false;
    traits.operations.capacity_refusal = false;
    traits.limits.capacity_shared = true;
  }
  // A wider arithmetic than the engine's widens every derived bound: what a
  // real engine's arithmetic costs in bug-finding power, measured on the
  // engine whose faults we know (docs/TOLERANCE.md, "Does it blind the
  // harness?").
  if (auto it = spec.options.find("arithmetic"); it != spec.options.end()) {
    const std::optional<ArithmeticTraits> preset = find_arithmetic_preset(it->second);
    if (!preset) {
      throw InputError("--backend " + spec.name + ": arithmetic=" + it->second +
                       " (known: " + arithmetic_preset_names() + ")");
    }
    traits.arithmetic = *preset;
  }
}

// kv_dtypes=T,...: only those of the engine's cache types are drawn, so a
// declared arithmetic can be checked on the types it covers (a q5_1 V's
// bound does not cover the in-tree bf16 cache: docs/TOLERANCE.md).
void narrow_kv_dtypes(const BackendSpec& spec, EngineTraits& traits) {
  auto it = spec.options.find("kv_dtypes");
  if (it == spec.options.end()) return;
  std::vector<KvDtype> kept;
  std::string declared;
  for (KvDtype t : traits.limits.kv_dtypes)
    declared += (declared.empty() ? "" : ", ") + std::string(kv_dtype_name(t));
  for (size_t begin = 0; begin <= it->second.size();) {
    size_t end = it->second.find(',', begin);
    if (end == std::string::npos) end = it->second.size();
    const std::string name = it->second.substr(begin, end - begin);
    const Result<KvDtype> t = parse_kv_dtype(name);
    const auto& all = traits.limits.kv_dtypes;
    if (!t.ok() || std::find(all.begin(), all.end(), t.value()) == all.end()) {
      throw InputError("--backend " + spec.name + ": kv_dtypes=" + it->second + ": \"" + name +
                       "\" is not a cache type this engine declares (" + declared + ")");
    }
    if (std::find(kept.begin(), kept.end(), t.value()) == kept.end()) kept.push_back(t.value());
    begin = end + 1;
  }
  traits.limits.kv_dtypes = kept;
}

}  // namespace

void BackendRegistry::add(const std::string& name, const std::string& description, Maker maker) {
  entries_.push_back({name, description, false, std::move(maker)});
}

void BackendRegistry::add_prefix(const std::string& prefix, const std::string& description,
                                 Maker maker) {
  entries_.push_back({prefix, description, true, std::move(maker)});
}

std::string BackendRegistry::names() const {
  std::string out;
  for (const Entry& e : entries_) {
    out += (out.empty() ? "" : ", ") + e.name + (e.is_prefix ? "PATH" : "");
  }
  return out;
}

Backend BackendRegistry::resolve(const std::string& text) const {
  BackendSpec spec = parse_backend_spec(text);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    const bool match = e.is_prefix ? spec.name.rfind(e.name, 0) == 0 : spec.name == e.name;
    if (match) found = &e;
  }
  if (found == nullptr && spec.name == "cuda") {
    throw InputError(
        "--backend cuda: this kvcheck was built without the CUDA engine (nvcc was not found "
        "at configure time); install the CUDA toolkit and configure again (docs/CUDA.md)");
  }
  if (found == nullptr) {
    throw InputError("--backend: unknown backend \"" + spec.name + "\" (registered: " + names() +
                     ")");
  }
  BackendSpec engine_spec = spec;
  engine_spec.options.erase("invariance");
  engine_spec.options.erase("profile");
  engine_spec.options.erase("arithmetic");
  engine_spec.options.erase("kv_dtypes");
  engine_spec.options_text.clear();
  for (const auto& [key, value] : engine_spec.options) {
    engine_spec.options_text += (engine_spec.options_text.empty() ? "" : "&") + key + "=" + value;
  }
  Backend backend = found->maker(engine_spec);
  apply_generic_options(spec, backend.traits);
  narrow_kv_dtypes(spec, backend.traits);
  backend.weakened = spec.options.count("invariance") + spec.options.count("profile") +
                         spec.options.count("arithmetic") + spec.options.count("kv_dtypes") >
                     0;
  if (const std::string error = backend.traits.validate(); !error.empty()) {
    throw InputError("--backend " + text + ": the engine's traits contradict themselves: " + error);
  }
  backend.spec = text;
  return backend;
}

const BackendRegistry& backend_registry() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    register_in_tree_backends(r);
    register_plugin_loader(r);
    register_exec_backend(r);
    return r;
  }();
  return registry;
}

}  // namespace kvcheck
