// `kvcheck replay FILE|DIR...`: re-runs each case file's property (or every
// property with --all) and prints a report a person can act on: the verdict
// against the one the file recorded, the first diverging call, sequence and
// position, the per-layer cache table for cache faults and, for invariance
// failures, the two schedules with the first differing logit in value and
// bits. Exit 1 when a case fails, 0 when all hold, 2 on bad input.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "model/status.h"
#include "properties/property.h"
#include "properties/repro/case_file.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/counted.h"
#include "tools/failure_report.h"
#include "tools/fresh_child.h"
#include "tools/model_option.h"
#include "tools/report_html.h"
#include "tools/run_report.h"
#include "tools/trace.h"

namespace kvcheck::cli {

namespace {

struct ReplayOptions {
  std::vector<std::string> paths;
  bool all = false;
  std::string backend;
  std::string fault;  // empty: the case's own
  std::string json_path;
  std::string html_path;
  std::string reference;  // P10's reference backend
  std::string model;      // --model DIR, for case files of --model runs
  bool trace = false;
  bool in_process = false;  // no forked process per check: a crash ends kvcheck (for gdb)
};

// The schedule, one call a line, the diverging call marked.
std::string schedule_text(const Scenario& s, int marked_call) {
  std::ostringstream out;
  for (size_t c = 0; c < s.calls.size(); ++c) {
    out << (int(c) == marked_call ? "  > " : "    ") << "call " << c << ": " << s.calls[c].to_text()
        << "\n";
  }
  return out.str();
}

// How one sequence was fed by the scenario: its chunk lengths and the calls.
std::string sequence_schedule(const Scenario& s, int sequence) {
  const SchedulePlan plan = plan_schedule(s);
  std::ostringstream out;
  out << "s" << sequence << " in the scenario: chunks ";
  const std::vector<int>& chunks = plan.chunks[size_t(sequence)];
  for (size_t i = 0; i < chunks.size(); ++i) out << (i ? "+" : "") << chunks[i];
  out << " (calls";
  int last = -1;
  for (int call : plan.call_of_position[size_t(sequence)]) {
    if (call != last) out << " " << call;
    last = call;
  }
  out << "), tokens";
  for (int i = 0; i < plan.fed[size_t(sequence)]; ++i) {
    out << " " << s.sequences[size_t(sequence)][size_t(i)];
  }
  out << "\n";
  return out.str();
}

nlohmann::json location_json(const Location& w) {
  nlohmann::json out = nlohmann::json::object();
  const auto put = [&](const char* name, int value) {
    if (value >= 0) out[name] = value;
  };
  put("call", w.call);
  put("sequence", w.sequence);
  put("position", w.position);
  put("layer", w.layer);
  put("kv_head", w.kv_head);
  put("first_bad_position", w.first_bad_position);
  put("last_bad_position", w.last_bad_position);
  return out;
}

nlohmann::json verdict_json(const Verdict& v) {
  return {{"property", property_name(v.property)},
          {"outcome", outcome_name(outcome_of(v))},
          {"summary", v.summary},
          {"where", location_json(v.where)},
          {"worst_error_over_bound", v.worst_ratio},
          {"detail", v.detail},
          {"trace", v.trace}};
}

bool is_invariance(Property p) {
  return p == Property::kChunking || p == Property::kBatch || p == Property::kReset ||
         p == Property::kCompaction || p == Property::kGqa || p == Property::kDeterminism;
}

const char* status_of(const Verdict& v) {
  return !v.passed ? "FAILED" : v.applicable ? "passed" : "not applicable";
}

// A check of the case as its file records it: after its prelude, when it has
// one, in an engine process started for this check (tools/fresh_child.h).
PreludeRun replay_check(const CaseFile& c, const CaseEngine& engine, Property property,
                        const Scenario& s) {
  if (c.prelude.empty()) return {{}, check_case(engine, property, s)};
  return check_after_prelude(engine.subject, c.prelude, property, s);
}

// Where a case with a prelude runs: an exec: engine in a process of its own
// for each check, an in-process one as always.
const char* prelude_process(const CaseEngine& engine) {
  return serves_many_cases(engine.subject) ? "in a fresh engine process" : "in process";
}

// Each prelude case's verdict, as seen before the check they preceded.
void print_prelude(const PreludeRun& run, const CaseEngine& engine, nlohmann::json& out) {
  std::printf("  after its prelude, %s:", prelude_process(engine));
  for (size_t i = 0; i < run.prelude.size(); ++i) {
    const Verdict& p = run.prelude[i];
    std::printf("%s %s %s", i ? "," : "", std::string(property_label(p.property)).c_str(),
                status_of(p));
    out["prelude"].push_back(verdict_json(p));
  }
  std::printf("\n");
}

// The verdict beside the one the case file recorded (its outcome, then its
// localization), into `out` as well.
void compare_with_recorded(const CaseFile& c, const Verdict& v, nlohmann::json& out) {
  const RecordedVerdict now = record_verdict(v);
  const bool same_outcome = now.outcome == c.verdict.outcome;
  const bool same = now == c.verdict;
  std::printf("  recorded: %s%s%s\n", std::string(outcome_name(c.verdict.outcome)).c_str(),
              c.verdict.summary.empty() ? "" : ": ", c.verdict.summary.c_str());
  std::printf("  %s\n", same           ? "the same verdict as recorded"
                        : same_outcome ? "the same outcome as recorded, another localization"
                                       : "a DIFFERENT outcome than recorded");
  out["matches_recorded"] = same;
  out["outcome_matches_recorded"] = same_outcome;
}

// Where a failure first diverged: the call, sequence, position, layer and
// head, the schedule around it, and the verdict's own detail lines.
void print_divergence(const Scenario& s, Property property, const Verdict& v) {
  const Location& w = v.where;
  std::printf("\n  first divergence:");
  if (w.call >= 0) {
    std::printf(" call %d", w.call);
    if (w.call < static_cast<int>(s.calls.size())) {
      std::printf(" (%s)", s.calls[size_t(w.call)].to_text().c_str());
    } else {
      std::printf(" (a probe call after the scenario)");
    }
  }
  if (w.sequence >= 0) std::printf(", sequence s%d", w.sequence);
  if (w.position >= 0) std::printf(", position %d", w.position);
  if (w.layer >= 0) std::printf(", layer %d", w.layer);
  if (w.kv_head >= 0) std::printf(", kv head %d", w.kv_head);
  if (w.first_bad_position >= 0) {
    std::printf(", wrong positions %d..%d", w.first_bad_position, w.last_bad_position);
  }
  std::printf("\n  schedule:\n%s", schedule_text(s, w.call).c_str());
  if (is_invariance(property) && w.sequence >= 0 &&
      w.sequence < static_cast<int>(s.sequences.size())) {
    std::printf("  the two runs compared (first differing logit below, value and bits):\n    %s",
                sequence_schedule(s, w.sequence).c_str());
  }
  std::printf("\n");
  std::istringstream detail(v.detail);
  for (std::string line; std::getline(detail, line);) std::printf("  | %s\n", line.c_str());
}

// The cache itself, for a failure of another property: it tells whether the
// cached K/V are wrong (and where) or the fault is elsewhere. An invariance
// failure may only show under the other schedule, so the diverging sequence
// fed token by token (the schedule that exercises the cache most) is checked
// too.
void localize_in_cache(const CaseFile& c, const CaseEngine& engine, const Location& w,
                       nlohmann::json& out) {
  const Scenario& s = c.scenario;
  std::vector<std::pair<std::string, Scenario>> subjects = {{"the scenario", s}};
  if (w.sequence >= 0 && w.sequence < static_cast<int>(s.sequences.size())) {
    const int fed = plan_schedule(s).fed[size_t(w.sequence)];
    if (fed >= 2) {
      const std::span<const int32_t> tokens =
          std::span<const int32_t>(s.sequences[size_t(w.sequence)]).first(size_t(fed));
      subjects.push_back({"s" + std::to_string(w.sequence) + " alone, fed token by token",
                          solo_scenario(s, tokens, std::vector<int>(size_t(fed), 1))});
    }
  }
  std::printf("\n  cache localization (P6%s):\n",
              c.prelude.empty() ? "" : ", each after the prelude");
  bool all_checked = true;
  for (const auto& [name, subject] : subjects) {
    const Verdict cache = replay_check(c, engine, Property::kCacheState, subject).verdict;
    all_checked &= cache.applicable;
    nlohmann::json item = verdict_json(cache);
    item["on"] = name;
    out["cache_localization"].push_back(item);
    std::printf("  on %s: %s\n", name.c_str(), cache.summary.c_str());
    if (!cache.passed) {
      if (name != "the scenario") {
        std::printf("%s", schedule_text(subject, cache.where.call).c_str());
      }
      std::istringstream lines(cache.detail);
      for (std::string line; std::getline(lines, line);) std::printf("  | %s\n", line.c_str());
      return;
    }
  }
  if (all_checked) {
    std::printf(
        "  the cached K/V match the oracle after every call: the fault is in how the "
        "cache is read (positions, mask, heads) or outside it\n");
  } else {
    std::printf("  P6 did not apply, so the cache was not checked: the fault is not located\n");
  }
}

// Replays one property of one case; prints the report and returns its JSON
// (and the verdict in `v`).
nlohmann::json replay_property(const CaseFile& c, Property property, const CaseEngine& engine,
                               bool compare_recorded, bool& failed, Verdict& v) {
  const PreludeRun run = replay_check(c, engine, property, c.scenario);
  v = run.verdict;
  nlohmann::json out = verdict_json(v);
  failed |= !v.passed;
  std::printf("%s %s: %s\n", std::string(property_label(property)).c_str(), status_of(v),
              v.summary.c_str());
  if (!c.prelude.empty()) print_prelude(run, engine, out);
  if (compare_recorded && c.has_verdict) compare_with_recorded(c, v, out);
  if (v.passed) return out;
  print_divergence(c.scenario, property, v);
  if (property != Property::kCacheState) localize_in_cache(c, engine, v.where, out);
  return out;
}

// The prelude a case file lists, before its verdicts.
void print_prelude_cases(const CaseFile& c, const CaseEngine& engine) {
  if (c.prelude.empty()) return;
  std::printf("prelude: %zu case%s run first, in this order, %s, before each check of this case\n",
              c.prelude.size(), c.prelude.size() == 1 ? "" : "s", prelude_process(engine));
  for (size_t i = 0; i < c.prelude.size(); ++i) {
    const PreludeCase& p = c.prelude[i];
    std::printf("  prelude %zu: %s %s, size %d\n", i + 1,
                std::string(property_label(p.property)).c_str(),
                std::string(property_name(p.property)).c_str(), p.scenario.size());
  }
}

// --trace: the case's run, after its prelude when it has one.
std::vector<std::string> traced(const CaseFile& c, const CaseEngine& engine) {
  if (c.prelude.empty())
    return cache_trace(c.scenario, engine.subject.factory,
                       [](const Call& call) { return call.to_text(); });
  const EngineUnderTest fresh = fresh_process(engine.subject);
  run_prelude(fresh, c.prelude, c.scenario);
  std::printf("(after the prelude, %s)\n", prelude_process(engine));
  return cache_trace(c.scenario, fresh.factory, [](const Call& call) { return call.to_text(); });
}

// The backends a replay ran on, each once, for the HTML report.
void record_backend(RunRecord& record, const Backend& b) {
  for (const BackendRecord& known : record.backends) {
    if (known.spec == b.spec) return;
  }
  BackendRecord backend;
  backend.spec = b.spec;
  backend.traits = traits_summary(b.traits, "");
  backend.declared = b.traits;
  record.backends.push_back(std::move(backend));
}

std::string replay_command(const ReplayOptions& o) {
  std::string command = "kvcheck replay";
  for (const std::string& p : o.paths) command += " " + shell_quote(p);
  if (o.all) command += " --all";
  if (!o.backend.empty()) command += " --backend " + shell_quote(o.backend);
  if (!o.reference.empty()) command += " --reference " + shell_quote(o.reference);
  if (!o.fault.empty()) command += " --fault " + shell_quote(o.fault);
  if (!o.model.empty()) command += " --model " + shell_quote(o.model);
  return command;
}

// What the replay of every file adds up to.
struct ReplayRun {
  RunRecord record;
  nlohmann::json report = nlohmann::json::array();  // one entry a file
  bool any_failed = false, any_bad = false;
  int failed_cases = 0, held_cases = 0;
};

// The case file and the engine it runs on, or why it cannot be replayed (the
// entry's "error", a bad input).
std::optional<std::pair<CaseFile, CaseEngine>> open_case(
    const ReplayOptions& o, const std::optional<FaultSet>& fault_override, const std::string& file,
    nlohmann::json& entry) {
  const Result<CaseFile> parsed = read_case_file(file);
  if (!parsed) {
    std::printf("bad case file: %s\n\n", parsed.error().c_str());
    entry["error"] = parsed.error();
    return std::nullopt;
  }
  CaseFile c = parsed.value();
  try {
    c.scenario.model = case_model(c, o.model);
    CaseEngine engine = case_engine(c, o.backend, fault_override, o.reference);
    engine.in_process = o.in_process;
    return std::pair{std::move(c), std::move(engine)};
  } catch (const InputError& e) {
    std::printf("cannot replay: %s\n\n", e.what());
    entry["error"] = e.what();
    return std::nullopt;
  }
}

// The case's header: property, model, engine, faults, notes and prelude.
void print_case_header(const CaseFile& c, const CaseEngine& engine,
                       const std::optional<FaultSet>& fault_override) {
  const Scenario& s = c.scenario;
  std::printf(
      "%s %s, %s model (%d layers, %d heads over %d kv heads), %zu sequences, %zu calls, "
      "size %d\n",
      std::string(property_label(c.property)).c_str(),
      std::string(property_name(c.property)).c_str(), family_name(s.config.family),
      s.config.n_layers, s.config.n_heads, s.config.n_kv_heads, s.sequences.size(), s.calls.size(),
      s.size());
  const std::string recorded = fault_override && *fault_override != c.faults
                                   ? " (the case records " + c.faults.to_string() + ")"
                                   : "";
  std::printf("engine: %s (%s %s), faults: %s%s\n", engine.backend.spec.c_str(),
              engine.backend.traits.identity.name.c_str(),
              engine.backend.traits.identity.version.c_str(), engine.faults.to_string().c_str(),
              recorded.c_str());
  if (s.model) std::printf("model: %s (%s)\n", s.model->path.c_str(), s.model->hash.c_str());
  for (const std::string& note : c.notes) std::printf("note: %s\n", note.c_str());
  print_prelude_cases(c, engine);
  std::printf("\n");
}

// Replays one case file: its header, the trace if asked, and each property
// it checks, into `run`.
void replay_file(const ReplayOptions& o, const std::optional<FaultSet>& fault_override,
                 const std::string& file, ReplayRun& run) {
  std::printf("== %s\n", file.c_str());
  nlohmann::json entry = {{"file", file}};
  auto opened = open_case(o, fault_override, file, entry);
  if (!opened) {
    run.report.push_back(entry);
    run.any_bad = true;
    return;
  }
  const auto& [c, engine] = *opened;
  const Scenario& s = c.scenario;
  print_case_header(c, engine, fault_override);
  entry["property"] = property_name(c.property);
  entry["backend"] = engine.backend.spec;
  entry["faults"] = engine.faults.to_string();
  entry["recorded_faults"] = c.faults.to_string();
  entry["size"] = s.size();
  if (o.trace) {
    std::printf("cache trace ([batch, kv_heads, cached_len, head_dim], batch = 1 per line):\n");
    for (const std::string& line : traced(c, engine)) {
      std::printf("%s\n", line.c_str());
      entry["trace"].push_back(line);
    }
    std::printf("\n");
  }
  bool failed = false;
  const bool same_engine_as_recorded = !fault_override || *fault_override == c.faults;
  for (int i = 0; i < kPropertyCount; ++i) {
    const Property p = static_cast<Property>(i);
    if (!o.all && p != c.property) continue;
    FailureRecord r;
    r.property = p, r.backend = engine.backend.spec, r.faults = engine.faults.to_string();
    r.case_path = file;
    entry["verdicts"].push_back(replay_property(
        c, p, engine, same_engine_as_recorded && p == c.property, failed, r.verdict));
    record_backend(run.record, engine.backend);
    if (!r.verdict.passed) {
      r.case_text = read_text_file(file);
      // Their runs would go without the prelude, on another state.
      if (!o.html_path.empty() && c.prelude.empty()) {
        r.error_maps = error_maps(s, r.verdict, engine.subject);
        r.timeline = cache_timeline(s, engine.subject);
      }
      run.record.failures.push_back(r);
    }
    run.record.replayed.push_back(std::move(r));
  }
  entry["failed"] = failed;
  run.report.push_back(entry);
  run.any_failed |= failed;
  (failed ? run.failed_cases : run.held_cases) += 1;
  std::printf("\n");
}

int run_replay(const ReplayOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  ReplayRun run;
  RunRecord& record = run.record;
  record.command = "replay";
  record.started = utc_now_iso8601();
  record.reproduce = replay_command(o);
  record.faults = o.fault.empty() ? "as each case records" : o.fault;
  const std::vector<std::string> files = collect_case_files(o.paths);
  const std::optional<FaultSet> fault_override =
      o.fault.empty() ? std::nullopt : std::optional<FaultSet>(parse_fault_option(o.fault));
  for (const std::string& file : files) replay_file(o, fault_override, file, run);
  const std::string replayed = "replayed " + counted(int64_t(files.size()), "case file") + ": " +
                               std::to_string(run.failed_cases) + " failed, " +
                               std::to_string(run.held_cases) + " held";
  std::printf("%s%s\n", replayed.c_str(), run.any_bad ? ", some could not be read (exit 2)" : "");
  if (!o.json_path.empty()) {
    write_text_file("--json", o.json_path, nlohmann::json{{"cases", run.report}}.dump(2) + "\n");
  }
  if (!o.html_path.empty()) {
    record.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record.passed = !run.any_failed && !run.any_bad;
    record.outcome = replayed + (run.any_bad ? ", some could not be read" : "");
    write_text_file("--html", o.html_path, html_report(record));
  }
  return run.any_bad ? 2 : run.any_failed ? 1 : 0;
}

}  // namespace

Action add_replay(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "replay", "Re-run case files (or every *.case under a folder) and localize each failure");
  auto o = std::make_shared<ReplayOptions>();
  cmd->add_option("paths", o->paths, "case files or folders of them")->required();
  cmd->add_flag("--all", o->all, "check every property, not just the case's own");
  cmd->add_option("--backend", o->backend,
                  "backend string to replay on (default: the case's in-tree backend, else cpu; "
                  "a plugin or command named by a case runs only when given here)");
  cmd->add_option("--reference", o->reference, "P10's reference backend (e.g. cpu)");
  cmd->add_option("--fault", o->fault,
                  "fault switches to turn on instead of the case's: none, or names separated by "
                  "commas");
  cmd->add_option("--model", o->model,
                  "the checkpoint folder a --model case ran on; its files must still hash to "
                  "the case's model_hash");
  cmd->add_option("--json", o->json_path, "also write the report as JSON to FILE")
      ->check(report_file());
  cmd->add_option("--html", o->html_path,
                  "also write a self-contained HTML report to FILE (docs/REPORTS.md)")
      ->check(report_file());
  cmd->add_flag("--in-process", o->in_process,
                "check in kvcheck's own process, not in a forked one per check: a crash then "
                "ends kvcheck (for a debugger)");
  cmd->add_flag("--trace", o->trace,
                "print the cache shape [batch, kv_heads, cached_len, head_dim] of every sequence "
                "and layer after every call");
  return [cmd, o]() { return cmd->parsed() ? run_replay(*o) : -1; };
}

}  // namespace kvcheck::cli
