// `kvcheck memory [MODEL] [--config config.json]`: the KV-cache size of a
// model across dtypes and KV head schemes, with its sliding window where it
// has one (docs/MEMORY.md). Exit 0, or 2 on bad input.
#include <cstdio>
#include <iostream>
#include <memory>

#include "model/hf_config.h"
#include "model/kv_presets.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/kv_sizing.h"
#include "tools/run_report.h"

namespace kvcheck::cli {

namespace {

struct MemoryOptions {
  std::string preset;
  std::string config_path;
  bool list = false;
  int64_t context = 0;  // 0: the model's max context
  int64_t batch = 1;
  std::vector<std::string> dtypes;  // empty: all
  int window = -1;                  // -1: the model's own
  std::string json_path;            // "-": standard output
};

std::string preset_names() {
  std::string names;
  for (const KvShape& s : kv_presets()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

KvShape chosen_shape(const MemoryOptions& o) {
  if (!o.preset.empty() && !o.config_path.empty()) {
    throw InputError("give a preset (\"" + o.preset + "\") or --config, not both");
  }
  if (!o.config_path.empty()) return read_hf_config_file(o.config_path).value();
  if (o.preset.empty()) {
    throw InputError("model: give a preset (" + preset_names() + ") or --config config.json");
  }
  const std::optional<KvShape> shape = find_kv_preset(o.preset);
  if (!shape) {
    throw InputError("model: unknown preset \"" + o.preset + "\"; expected one of " +
                     preset_names() + " (or --config config.json)");
  }
  return *shape;
}

SizingRequest request_of(const MemoryOptions& o) {
  SizingRequest r;
  r.shape = chosen_shape(o);
  if (o.window >= 0) r.shape.window = o.window;
  r.context = o.context > 0 ? uint64_t(o.context) : uint64_t(r.shape.max_context);
  r.batch = uint64_t(o.batch);
  for (const std::string& name : o.dtypes) {
    const Result<SizingDtype> t = parse_sizing_dtype(name);
    if (!t) throw InputError("--" + t.error());
    r.dtypes.push_back(t.value());
  }
  if (r.dtypes.empty()) r.dtypes = all_sizing_dtypes();
  return r;
}

int run_memory(const MemoryOptions& o) {
  if (o.list) {
    std::printf("%s", presets_text().c_str());
    return 0;
  }
  const KvSizing sizing = size_kv_cache(request_of(o));
  if (o.json_path == "-") {
    std::cout << sizing_json(sizing).dump(2) << "\n";
    return 0;
  }
  std::printf("%s", sizing_text(sizing).c_str());
  if (!o.json_path.empty()) {
    write_text_file("--json", o.json_path, sizing_json(sizing).dump(2) + "\n");
  }
  return 0;
}

}  // namespace

Action add_memory(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "memory", "KV-cache size of a model across dtypes, KV head schemes and its sliding window");
  auto o = std::make_shared<MemoryOptions>();
  cmd->add_option("model", o->preset, "a preset: " + preset_names());
  cmd->add_option("--config", o->config_path, "a Hugging Face config.json instead of a preset");
  cmd->add_flag("--list", o->list, "print the presets and their shapes");
  cmd->add_option("--context", o->context, "tokens per sequence (default: the model's max)")
      ->check(whole_number(1));
  cmd->add_option("--batch", o->batch, "sequences")->check(whole_number(1))->capture_default_str();
  cmd->add_option("--dtype", o->dtypes, "f32, bf16, f16, int8, separated by commas (default: all)")
      ->delimiter(',');
  cmd->add_option("--window", o->window,
                  "sliding window in tokens instead of the model's own; 0: none")
      ->check(whole_number(0, std::numeric_limits<int>::max()));
  cmd->add_option("--json", o->json_path,
                  "also write the result as JSON to FILE; - writes only the JSON, to standard "
                  "output")
      ->check(report_file());
  return [cmd, o]() { return cmd->parsed() ? run_memory(*o) : -1; };
}

}  // namespace kvcheck::cli
