// `kvcheck campaign`: the main job. Runs every property on every available
// backend for a time budget with a live progress line, prints a summary per
// property and backend, then the fault kill matrix. Exit 0 when everything
// held (and every fault was killed), 1 when a property failed on a correct
// engine or a fault survived, 2 on bad input.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/faults.h"
#include "engine/traits_json.h"
#include "model/rng.h"
#include "model/status.h"
#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/rc/kill_matrix.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"
#include "tools/backends.h"
#include "tools/commands.h"
#include "tools/failure_report.h"
#include "tools/junit.h"
#include "tools/model_option.h"
#include "tools/report_html.h"
#include "tools/run_report.h"

namespace kvcheck::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct CampaignOptions {
  uint64_t seed = 0;
  bool seed_given = false;
  int cases = 0;        // per property and backend; 0 = until the time is up
  int turn_cases = 25;  // cases per property per turn of the round robin
  double seconds = 60;  // the whole campaign, kill matrix included
  std::vector<std::string> properties;
  std::vector<std::string> backends;
  std::string json_path;
  std::string junit_path;
  std::string html_path;
  std::string failures_dir = "kvcheck-failures";
  int kill_cases = 200;  // per fault
  bool kill_matrix = true;
  bool kill_per_property = false;  // every (fault, property) cell, not only 'any'
  std::string fault = "none";      // run the properties against this faulty engine
  std::string reference;           // P10's reference backend; empty: P10 not applicable
  std::string model;               // --model DIR: a Hugging Face checkpoint; empty: seeded models
};

void count_coverage(const Scenario& s, std::map<std::string, int>& out) {
  const rcgen::Coverage c = rcgen::coverage(s);
  const std::pair<const char*, bool> classes[] = {{c.gpt2 ? "gpt2" : "llama", true},
                                                  {"mha", c.mha},
                                                  {"gqa", c.gqa},
                                                  {"mqa", c.mqa},
                                                  {"batched", c.batched_step},
                                                  {"mixed", c.mixed_step},
                                                  {"1-token chunk", c.one_token_chunk},
                                                  {"reset", c.reset},
                                                  {"finish", c.finish},
                                                  {"reused row", c.reused_row},
                                                  {"at capacity", c.at_capacity},
                                                  {"bf16/f16/q8_0", c.reduced_dtype},
                                                  {"q8_0 2 blocks", c.q8_multi_block},
                                                  {"window wraps", c.window_wraps},
                                                  {"erase/shift", c.erase || c.shift}};
  for (const auto& [name, on] : classes) {
    if (on) ++out[name];
  }
}

std::string coverage_text(const Tally& t) {
  std::string text;
  for (const auto& [name, n] : t.coverage) {
    if (!text.empty()) text += ", ";
    text += name + " " + std::to_string(t.cases ? 100 * n / t.cases : 0) + "%";
  }
  return text;
}

class Progress {
 public:
  explicit Progress(Clock::time_point start) : start_(start), tty_(isatty(STDERR_FILENO)) {}
  void update(const std::string& line, bool force = false) {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!force && since < (tty_ ? 0.25 : 10.0)) return;
    last_ = now;
    const double t = std::chrono::duration<double>(now - start_).count();
    if (tty_) {
      std::fprintf(stderr, "\r\033[K[%6.1fs] %s", t, line.c_str());
    } else {
      std::fprintf(stderr, "[%6.1fs] %s\n", t, line.c_str());
    }
    std::fflush(stderr);
  }
  void done() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  Clock::time_point start_, last_{};
  bool tty_;
};

// "the engine lacks reset" from "P4 reset: not applicable: the engine lacks reset".
std::string not_applicable_reason(const Verdict& v) {
  const std::string marker = "not applicable: ";
  const size_t at = v.summary.find(marker);
  return at == std::string::npos ? v.summary : v.summary.substr(at + marker.size());
}

void print_not_applicable(const std::vector<Tally>& tallies) {
  bool header = false;
  for (const Tally& t : tallies) {
    for (const auto& [why, n] : t.not_applicable_why) {
      if (!header) std::printf("\nnot applicable (never counted as passed):\n"), header = true;
      std::printf("  %-3s on %s: %d cases: %s\n", std::string(property_label(t.property)).c_str(),
                  t.backend.c_str(), n, why.c_str());
    }
  }
}

// Backends from `from` on that will run a kill matrix: they share the time.
int kill_matrix_backends(const std::vector<Backend>& backends, size_t from) {
  int n = 0;
  for (size_t b = from; b < backends.size(); ++b) n += backends[b].traits.operations.fault_switches;
  return std::max(n, 1);
}

std::vector<Property> chosen_properties(const CampaignOptions& o) {
  std::vector<Property> out;
  if (o.properties.empty()) {
    for (int i = 0; i < kPropertyCount; ++i) out.push_back(static_cast<Property>(i));
    return out;
  }
  for (const std::string& name : o.properties) {
    const auto p = parse_property(name);
    if (!p) {
      std::string known;
      for (int i = 0; i < kPropertyCount; ++i) {
        known += (i ? ", " : "") + std::string(property_name(static_cast<Property>(i)));
      }
      throw InputError("--property: unknown property \"" + name + "\" (known: " + known + ")");
    }
    out.push_back(*p);
  }
  return out;
}

KillRecord kill_record(const std::string& backend, const rcgen::KillMatrixRow& row,
                       const std::vector<std::string>& problems) {
  const rcgen::HuntResult* best = row.smallest();
  KillRecord k;
  k.backend = backend;
  k.fault = row.fault ? std::string(fault_name(*row.fault)) : "(correct engine)";
  k.is_fault = row.fault.has_value();
  k.ran = row.ran;
  k.killed = best != nullptr;
  k.cases_to_kill = row.any.cases_run;
  k.killed_by = best ? std::string(property_name(best->verdict.property)) : "";
  k.shrunk_size = best ? best->counterexample->size() : 0;
  k.shrunk_scenario = best ? best->counterexample->to_text() : "";
  for (size_t i = 0; i < row.cells.size(); ++i) {
    const rcgen::HuntResult& r = row.cells[i];
    k.cells.push_back({static_cast<Property>(i), r.failed, r.cases_run,
                       r.counterexample ? r.counterexample->size() : 0});
  }
  // KillMatrix::problems names the row first ("kv_swapped survived ...",
  // "the correct engine fails ...").
  for (const std::string& p : problems) {
    const bool mine = row.fault ? p.rfind(row.name + ":", 0) == 0 || p.rfind(row.name + " ", 0) == 0
                                : p.rfind("the correct engine", 0) == 0;
    if (mine) k.problems.push_back(p);
  }
  return k;
}

nlohmann::json per_property_json(const KillRecord& k) {
  nlohmann::json cells = nlohmann::json::array();
  for (const KillRecord::Cell& c : k.cells) {
    cells.push_back({{"property", property_name(c.property)},
                     {"killed", c.killed},
                     {"cases", c.cases},
                     {"shrunk_size", c.shrunk_size}});
  }
  return cells;
}

int run_campaign(const CampaignOptions& o) {
  const auto start = Clock::now();
  RunRecord record;
  record.command = "campaign";
  record.started = utc_now_iso8601();
  const uint64_t seed =
      o.seed_given ? o.seed
                   : (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}());
  const std::vector<Property> properties = chosen_properties(o);
  const std::vector<Backend> backends = chosen_backends(o.backends);
  const FaultSet faults = parse_fault_option(o.fault);
  const std::shared_ptr<const EngineUnderTest> reference = reference_engine(o.reference);
  const std::shared_ptr<const Checkpoint> model = load_model_option(o.model);
  std::vector<EngineUnderTest> subjects;  // [backend]
  for (const Backend& b : backends) subjects.push_back(engine_under_test(b, faults, reference));
  // With a fault on, failures are the point: the kill matrix adds nothing.
  const bool kill_matrix = o.kill_matrix && !faults.any();
  std::printf("kvcheck campaign: seed %llu, %zu properties x %zu backends, budget %.0f s%s\n",
              (unsigned long long)seed, properties.size(), backends.size(), o.seconds,
              o.cases ? (", at most " + std::to_string(o.cases) + " cases each").c_str() : "");
  std::string backend_args;
  for (const Backend& b : backends) backend_args += " --backend " + shell_quote(b.spec);
  if (reference) backend_args += " --reference " + shell_quote(reference->backend);
  if (model) backend_args += " --model " + shell_quote(model->path);
  char time_text[32];
  std::snprintf(time_text, sizeof(time_text), "%.0f", o.seconds);
  record.seed = seed, record.has_seed = true;
  record.faults = faults.to_string();
  record.kill_cases = o.kill_cases;
  record.reproduce = "kvcheck campaign --seed " + std::to_string(seed) + " --time " + time_text +
                     backend_args + (faults.any() ? " --fault " + faults.to_string() : "");
  std::printf("reproduce: %s\n", record.reproduce.c_str());
  for (const Backend& b : backends) {
    record.backends.push_back({b.spec, traits_summary(b.traits, "")});
    std::printf("backend %s\n%s", b.spec.c_str(), traits_summary(b.traits, "  ").c_str());
  }
  if (model) {
    const Config& c = model->config;
    std::printf(
        "model %s (%s): %s, %d layers, d_model %d, %d heads over %d kv heads, head_dim %d, "
        "vocab %d, max_pos %d; generators vary schedules and tokens only\n",
        model->path.c_str(), model->hash.c_str(), family_name(c.family), c.n_layers, c.d_model,
        c.n_heads, c.n_kv_heads, c.head_dim, c.vocab, c.max_pos);
  }
  if (faults.any()) std::printf("engine faults ON: %s\n", faults.to_string().c_str());
  std::fflush(stdout);

  // The kill matrix usually needs well under a second (every fault dies within
  // a few cases); 10 % of the budget leaves it room for slow machines, where
  // a backend will run one (it declares fault switches).
  const bool kill_matrix_runs =
      kill_matrix && std::any_of(backends.begin(), backends.end(), [](const Backend& b) {
        return b.traits.operations.fault_switches;
      });
  const double property_budget = kill_matrix_runs ? o.seconds * 0.9 : o.seconds;
  std::vector<Tally> tallies;
  for (const Backend& b : backends) {
    for (Property p : properties) {
      Tally t;
      t.property = p;
      t.backend = b.spec;
      tallies.push_back(t);
    }
  }
  Progress progress(start);
  SplitMix64 batch_seeds(seed);
  bool any_failure = false;
  const int kBatch = o.turn_cases;
  int total_cases = 0;
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (bool progress_made = true; progress_made && elapsed() < property_budget;) {
    progress_made = false;
    for (Tally& t : tallies) {
      if (t.failed || (o.cases && t.cases >= o.cases) || elapsed() >= property_budget) continue;
      const size_t index =
          size_t(std::find_if(backends.begin(), backends.end(),
                              [&](const Backend& b) { return b.spec == t.backend; }) -
                 backends.begin());
      const EngineUnderTest& subject = subjects[index];
      rcgen::HuntOptions h;
      h.traits = subject.traits;
      h.model = model;
      h.seed = batch_seeds.next();
      h.max_cases = o.cases ? std::min(kBatch, o.cases - t.cases) : kBatch;
      // Shrinking may overrun the property budget by a tenth of --time at
      // most; past that the smallest failing case found so far is reported.
      const double shrink_seconds = std::max(property_budget - elapsed(), 0.1 * o.seconds);
      h.shrink_deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(shrink_seconds));
      bool shrinking = false;
      int shrink_tries = 0;
      const auto check = [&](const Scenario& s) {
        Verdict v = check_property(t.property, s, subject);
        if (shrinking) {
          progress.update(std::string(property_label(t.property)) + " on " + t.backend +
                          ": shrinking a failure, " + std::to_string(++shrink_tries) +
                          " candidates run, " + std::to_string(int(elapsed())) + " s");
        } else {
          ++t.cases, ++total_cases;
          if (!v.applicable) ++t.not_applicable, ++t.not_applicable_why[not_applicable_reason(v)];
          if (v.passed) ++t.passed;
          t.worst_ratio = std::max(t.worst_ratio, v.worst_ratio);
          if (v.applicable && has_error_bound(t.property)) {
            ++t.ratio_histogram[size_t(ratio_bucket(v.passed ? v.worst_ratio : 1.0))];
          }
          count_coverage(s, t.coverage);
          if (!v.passed) shrinking = true;
          progress.update(
              std::string(property_label(t.property)) + " " +
              std::string(property_name(t.property)) + " on " + t.backend + ": " +
              std::to_string(t.cases) + " cases | " + std::to_string(total_cases) + " in all, " +
              std::to_string(int(total_cases / std::max(elapsed(), 1e-3))) + " cases/s");
        }
        return v;
      };
      const auto hunt_start = Clock::now();
      const rcgen::HuntResult r = rcgen::hunt(check, rcgen::emphasis_for(t.property), h);
      t.seconds += std::chrono::duration<double>(Clock::now() - hunt_start).count();
      progress_made = true;
      if (r.failed) {
        progress.done();
        if (r.shrinks_skipped > 0) {
          std::printf(
              "%s on %s: shrinking stopped by the time budget (%d candidates not run); "
              "the case below is the smallest failing one found\n",
              std::string(property_label(t.property)).c_str(), t.backend.c_str(),
              r.shrinks_skipped);
        }
        t.failed = true;
        any_failure = true;
        t.failure = r.verdict.summary;
        FailureRecord f;
        f.property = t.property;
        f.backend = t.backend;
        f.faults = faults.to_string();
        f.verdict = r.verdict;
        f.case_path =
            report_failure(r, t.property, backends[index], faults, h.seed, o.failures_dir);
        f.case_text = f.case_path.empty() ? "" : read_text_file(f.case_path);
        if (!o.html_path.empty() && r.counterexample) {
          f.error_maps = error_maps(*r.counterexample, r.verdict, subject);
          f.timeline = cache_timeline(*r.counterexample, subject);
        }
        record.failures.push_back(std::move(f));
      }
    }
  }
  progress.done();

  std::printf("\n%-16s %-14s %8s %8s %6s %11s  %s\n", "property", "backend", "cases", "passed",
              "n/a", "worst e/b", "coverage");
  for (const Tally& t : tallies) {
    char ratio[32] = "-";
    if (t.property == Property::kOracle || t.property == Property::kCacheState) {
      std::snprintf(ratio, sizeof(ratio), "%.3g", t.worst_ratio);
    }
    std::printf(
        "%-16s %-14s %8d %8d %6d %11s  %s\n",
        (std::string(property_label(t.property)) + " " + std::string(property_name(t.property)))
            .c_str(),
        t.backend.c_str(), t.cases, t.passed, t.not_applicable, ratio,
        t.failed ? ("FAILED: " + t.failure).c_str() : coverage_text(t).c_str());
  }
  print_not_applicable(tallies);

  nlohmann::json json;
  json["seed"] = seed;
  if (model) json["model"] = {{"path", model->path}, {"hash", model->hash}};
  for (const Backend& b : backends) {
    json["backends"].push_back({{"backend", b.spec}, {"traits", traits_to_json(b.traits)}});
  }
  for (const Tally& t : tallies) {
    json["properties"].push_back({{"property", property_name(t.property)},
                                  {"backend", t.backend},
                                  {"cases", t.cases},
                                  {"passed", t.passed},
                                  {"not_applicable", t.not_applicable},
                                  {"worst_error_over_bound", t.worst_ratio},
                                  {"coverage", t.coverage},
                                  {"not_applicable_why", t.not_applicable_why},
                                  {"failed", t.failed},
                                  {"failure", t.failure}});
  }

  bool fault_survived = false;
  int kill_matrices_run = 0;
  for (size_t b = 0; b < backends.size() && kill_matrix; ++b) {
    // Only an engine with fault switches can show that the properties bite.
    // It runs on seeded models even with --model: it proves the harness, and
    // on one fixed checkpoint (an MHA one, say) some faults cannot show.
    if (!backends[b].traits.operations.fault_switches) {
      std::printf("\nkill matrix: skipped on %s (it declares no fault switches)\n",
                  backends[b].spec.c_str());
      continue;
    }
    rcgen::KillMatrixOptions k;
    k.seed = seed;
    k.cases_per_cell = o.kill_cases;
    k.correct_cases = o.kill_cases;
    // The 'any' column alone (every property per case) is the fastest kill;
    // per property shows what each one still catches on its own.
    k.per_property = o.kill_per_property;
    k.catalogue_applies = !backends[b].weakened;
    k.time_limit_seconds =
        std::max(5.0, (o.seconds - elapsed()) / double(kill_matrix_backends(backends, b)));
    const Backend& backend = backends[b];
    ++kill_matrices_run;
    const rcgen::KillMatrix matrix =
        rcgen::run_kill_matrix([&](FaultSet f) { return engine_under_test(backend, f, reference); },
                               k, [&](const std::string& line) { progress.update(line); });
    progress.done();
    std::printf("\nkill matrix on %s (every property per case, up to %d cases per fault):\n%s",
                backend.spec.c_str(), o.kill_cases, matrix.table().c_str());
    const std::vector<std::string> problems = matrix.problems();
    for (const std::string& p : problems) std::printf("  problem: %s\n", p.c_str());
    fault_survived = fault_survived || !problems.empty();
    for (const rcgen::KillMatrixRow& row : matrix.rows) {
      const KillRecord k = kill_record(backend.spec, row, problems);
      json["kill_matrix"].push_back({{"backend", k.backend},
                                     {"fault", k.is_fault ? k.fault : "none"},
                                     {"ran", k.ran},
                                     {"killed", k.killed},
                                     {"cases_to_kill", k.cases_to_kill},
                                     {"killed_by", k.killed_by},
                                     {"shrunk_size", k.shrunk_size},
                                     {"shrunk_scenario", k.shrunk_scenario},
                                     {"per_property", per_property_json(k)},
                                     {"problems", k.problems}});
      record.kills.push_back(k);
    }
  }
  record.seconds = elapsed();
  record.passed = !any_failure && !fault_survived;
  record.outcome = any_failure             ? (faults.any() ? "a property caught the fault"
                                                           : "a property failed on a correct engine")
                   : fault_survived        ? "the kill matrix found a problem"
                   : kill_matrices_run > 0 ? "every property held and every fault was killed"
                                           : "every property held";
  std::printf("\n%s in %.1f s: %d property cases, %s\n", record.passed ? "passed" : "FAILED",
              record.seconds, total_cases, record.outcome.c_str());
  record.tallies = tallies;
  if (!o.json_path.empty()) write_text_file("--json", o.json_path, json.dump(2) + "\n");
  if (!o.junit_path.empty()) write_text_file("--junit", o.junit_path, junit_xml(record));
  if (!o.html_path.empty()) write_text_file("--html", o.html_path, html_report(record));

  return any_failure || fault_survived ? 1 : 0;
}

}  // namespace

Action add_campaign(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "campaign",
      "Run every property on every available backend for a time budget, then the "
      "fault kill matrix (the main job)");
  auto o = std::make_shared<CampaignOptions>();
  cmd->add_option_function<uint64_t>(
      "--seed", [o](uint64_t s) { o->seed = s, o->seed_given = true; },
      "campaign seed (default: random, printed)");
  cmd->add_option("--cases", o->cases,
                  "at most this many cases per property and backend (0: "
                  "until the time is up)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--turn-cases", o->turn_cases,
                  "cases per property and backend before the next one's turn (a slow engine, "
                  "such as llama.cpp at ~1 case/s, needs few so every property gets time)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--time", o->seconds, "time budget in seconds, kill matrix included")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--property", o->properties, "property name(s) (default: all)")->delimiter(',');
  cmd->add_option(
      "--backend", o->backends,
      "backend string, repeatable: cpu, cpu-reference, cuda, plugin:PATH.so[?opts] "
      "(default: the in-tree engines this machine runs; `kvcheck backends` lists them)");
  cmd->add_option("--reference", o->reference,
                  "P10: compare every backend with this one within the derived bound "
                  "(e.g. --reference cpu); without it P10 is not applicable");
  cmd->add_option("--model", o->model,
                  "a Hugging Face checkpoint folder (config.json + model.safetensors, GPT-2 or "
                  "Llama): check the cache on these weights; generators then vary schedules and "
                  "tokens, not the config (docs/MODELS.md)");
  cmd->add_option("--json", o->json_path, "also write the summary as JSON to FILE");
  cmd->add_option("--junit", o->junit_path,
                  "also write the results as JUnit XML to FILE (one suite per backend, one case "
                  "per property; the kill matrix as a suite per backend)");
  cmd->add_option("--html", o->html_path,
                  "also write a self-contained HTML report to FILE (docs/REPORTS.md)");

  cmd->add_option("--failures", o->failures_dir, "folder for case files of failures")
      ->capture_default_str();
  cmd->add_option("--kill-cases", o->kill_cases, "cases per fault in the kill matrix")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_flag("!--no-kill-matrix", o->kill_matrix, "skip the fault kill matrix");
  cmd->add_flag("--kill-per-property", o->kill_per_property,
                "kill matrix per property (which faults each one catches on its own), "
                "not only the 'any' column; much slower");
  cmd->add_option("--fault", o->fault,
                  "run against an engine with these faults on (names from docs/FAULTS.md, "
                  "comma-separated): shows a property catching them and writes the case file")
      ->capture_default_str();
  return [cmd, o]() { return cmd->parsed() ? run_campaign(*o) : -1; };
}

}  // namespace kvcheck::cli
