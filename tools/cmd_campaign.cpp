// `kvcheck campaign`: its options, and the run in order: set up, the kill
// matrix, the properties, the summary and the reports (tools/campaign.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <random>

#include "engine/faults.h"
#include "model/status.h"
#include "properties/rc/kill_matrix.h"
#include "properties/repro/failure_file.h"
#include "tools/backends.h"
#include "tools/build_info.h"
#include "tools/campaign.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/counted.h"
#include "tools/failure_report.h"
#include "tools/interrupt.h"
#include "tools/model_option.h"
#include "tools/shard.h"

namespace kvcheck::cli {

bool Campaign::out_of_time() const {
  return interrupted() != 0 || Clock::now() >= deadline;
}

Progress::Progress(Campaign::Clock::time_point start)
    : start_(start), tty_(isatty(STDERR_FILENO)) {}

void Progress::update(const std::string& line, bool force) {
  const auto now = Campaign::Clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (!force && since < (tty_ ? 0.25 : 10.0)) return;
  last_ = now;
  const double t = std::chrono::duration<double>(now - start_).count();
  // What was printed before comes first: with 2>&1 into a file, buffered
  // stdout would otherwise land after (or inside) the progress line.
  std::fflush(stdout);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K[%6.1fs] %s", t, line.c_str());
  } else {
    std::fprintf(stderr, "[%6.1fs] %s\n", t, line.c_str());
  }
  std::fflush(stderr);
}

void Progress::done() {
  if (tty_) std::fprintf(stderr, "\r\033[K");
}

std::vector<std::pair<std::string, std::string>> campaign_flags(const CampaignOptions& o,
                                                                uint64_t seed) {
  const CampaignOptions defaults;
  char time_text[32];
  std::snprintf(time_text, sizeof(time_text), "%g", o.seconds);
  std::vector<std::pair<std::string, std::string>> out = {{"--seed", std::to_string(seed)},
                                                          {"--time", time_text}};
  const auto add = [&](const std::string& flag, const std::string& value) {
    out.emplace_back(flag, value);
  };
  if (o.cases) add("--cases", std::to_string(o.cases));
  if (o.turn_cases != defaults.turn_cases) add("--turn-cases", std::to_string(o.turn_cases));
  if (o.scenarios_per_model != defaults.scenarios_per_model)
    add("--scenarios-per-model", std::to_string(o.scenarios_per_model));
  if (!o.properties.empty()) {
    std::string names;
    for (const std::string& p : o.properties) names += (names.empty() ? "" : ",") + p;
    add("--property", names);
  }
  for (const std::string& b : o.backends) add("--backend", b);
  if (!o.reference.empty()) add("--reference", o.reference);
  if (!o.model.empty()) add("--model", o.model);
  if (o.fault != defaults.fault) add("--fault", o.fault);
  if (!o.kill_matrix) add("--no-kill-matrix", "");
  if (o.kill_cases != defaults.kill_cases) add("--kill-cases", std::to_string(o.kill_cases));
  if (o.kill_seed != defaults.kill_seed) add("--kill-seed", std::to_string(o.kill_seed));
  if (o.kill_per_property) add("--kill-per-property", "");
  if (o.shrink_steps != defaults.shrink_steps)
    add("--shrink-steps", std::to_string(o.shrink_steps));
  return out;
}

std::string reproduce_command(const std::vector<std::pair<std::string, std::string>>& flags,
                              const Shard& shard) {
  // Quoted only where a shell would read the value otherwise.
  const auto word = [](const std::string& value) {
    const bool plain = std::all_of(value.begin(), value.end(), [](unsigned char ch) {
      return std::isalnum(ch) || std::strchr("_.,:/=+-@%", ch) != nullptr;
    });
    return plain ? value : shell_quote(value);
  };
  std::string out = "kvcheck campaign";
  for (const auto& [flag, value] : flags)
    out += " " + flag + (value.empty() ? "" : " " + word(value));
  if (shard.count > 1) {
    out += " --shard-index " + std::to_string(shard.index) + " --shard-count " +
           std::to_string(shard.count);
  }
  return out;
}

namespace {

void set_up(Campaign& c) {
  const CampaignOptions& o = c.options;
  c.shard = resolve_shard(o.shard, process_environment);
  if (c.shard.count > 1 && !o.seed_given) {
    throw InputError(shard_text(c.shard) +
                     ": needs --seed, the one campaign seed every shard draws from");
  }
  c.seed = o.seed_given
               ? o.seed
               : (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}());
  for (const std::string& name : o.properties) {
    const auto p = parse_property(name);
    if (!p) {
      std::string known;
      for (int i = 0; i < kPropertyCount; ++i) {
        known += (i ? ", " : "") + std::string(property_name(static_cast<Property>(i)));
      }
      throw InputError("--property: unknown property \"" + name + "\" (known: " + known + ")");
    }
    c.properties.push_back(*p);
  }
  if (o.properties.empty()) {
    for (int i = 0; i < kPropertyCount; ++i) c.properties.push_back(static_cast<Property>(i));
  }
  c.backends = chosen_backends(o.backends);
  c.faults = parse_fault_option(o.fault);
  if (!o.reference.empty()) {
    const Backend reference = backend_registry().resolve(o.reference);
    c.reference_forkable = reference.forkable;
    c.reference = std::make_shared<const EngineUnderTest>(reference.under_test());
  }
  c.model = load_model_option(o.model);
  for (size_t b = 0; b < c.backends.size(); ++b) {
    // Without --reference, P10 compares each engine with the next one the
    // campaign runs (cpu with cpu-reference by default, and back).
    std::shared_ptr<const EngineUnderTest> reference = c.reference;
    c.reference_specs.push_back(o.reference);
    if (!reference && c.backends.size() > 1) {
      const Backend& next = c.backends[(b + 1) % c.backends.size()];
      c.reference_forkable = c.reference_forkable && next.forkable;
      reference = std::make_shared<const EngineUnderTest>(next.under_test());
      c.reference_specs.back() = next.spec;
    }
    c.subjects.push_back(std::make_shared<const EngineUnderTest>(
        engine_under_test(c.backends[b], c.faults, reference)));
    c.histories.emplace_back(*c.subjects.back());
  }
}

void print_header(Campaign& c) {
  const CampaignOptions& o = c.options;
  RunRecord& r = c.record;
  std::printf("kvcheck campaign: seed %llu, %zu properties x %zu backends, budget %g s%s\n",
              (unsigned long long)c.seed, c.properties.size(), c.backends.size(), o.seconds,
              o.cases ? (", at most " + counted(o.cases, "case") + " each").c_str() : "");
  std::printf("reproduce: %s\n", r.reproduce.c_str());
  if (!c.shard.source.empty()) std::printf("%s\n", shard_text(c.shard).c_str());
  for (size_t i = 0; i < c.backends.size(); ++i) {
    const Backend& b = c.backends[i];
    r.backends.push_back({b.spec, traits_summary(b.traits, ""),
                          observable_features(b.traits.operations), b.traits, c.isolated(i)});
    std::printf("backend %s\n%s", b.spec.c_str(), traits_summary(b.traits, "  ").c_str());
  }
  if (c.model) {
    const Config& m = c.model->config;
    std::printf(
        "model %s (%s): %s, %d layers, d_model %d, %d heads over %d kv heads, head_dim %d, "
        "vocab %d, max_pos %d; generators vary schedules and tokens only\n",
        c.model->path.c_str(), c.model->hash.c_str(), family_name(m.family), m.n_layers, m.d_model,
        m.n_heads, m.n_kv_heads, m.head_dim, m.vocab, m.max_pos);
  }
  if (c.faults.any()) std::printf("engine faults ON: %s\n", c.faults.to_string().c_str());
  std::fflush(stdout);
}

// The status, exit code and final line, from what the phases recorded.
void conclude(Campaign& c) {
  RunRecord& r = c.record;
  r.seconds = c.earlier_seconds + c.elapsed();
  if (interrupted()) {
    r.status = "interrupted";
    r.exit_code = interrupted_exit_code();
    r.passed = false;
    r.outcome = std::string("interrupted by ") + (interrupted() == SIGINT ? "SIGINT" : "SIGTERM") +
                "; the reports hold what ran before it";
    return;
  }
  decide_verdict(r, c.faults.any(),
                 "incomplete: the time budget cut " + std::to_string(r.incomplete.size()) +
                     " budget" + (r.incomplete.size() == 1 ? "" : "s") +
                     " given in cases or steps; nothing failed");
}

// The record's header: what the reports say of the run before it starts.
void start_record(Campaign& c) {
  const CampaignOptions& o = c.options;
  RunRecord& r = c.record;
  r.command = "campaign";
  r.version = build_version(), r.commit = build_commit();
  r.arguments = o.arguments;
  r.options = campaign_flags(o, c.seed);
  r.shard_index = c.shard.index, r.shard_count = c.shard.count, r.shard_source = c.shard.source;
  if (c.model) r.model_path = c.model->path, r.model_hash = c.model->hash;
  r.started = utc_now_iso8601();
  r.seed = c.seed, r.has_seed = true;
  r.faults = c.faults.to_string();
  r.kill_cases = o.kill_cases;
  r.kill_seed = o.kill_seed;
  r.reproduce = reproduce_command(r.options, c.shard);
  r.status = "running";
  r.outcome = "running: a checkpoint of a run not finished (killed, or still running)";
}

// The kill matrix runs once per campaign: on shard 0 of a sharded one. With
// a fault on, failures are the point: it adds nothing.
void kill_phase(Campaign& c, Progress& progress) {
  const CampaignOptions& o = c.options;
  const bool wanted = o.kill_matrix && !c.faults.any() && !c.record.kill_matrix_done;
  if (wanted && c.shard.index != 0) {
    std::printf("\nkill matrix: run by shard 0 of %d\n", c.shard.count);
  } else if (wanted) {
    run_kill_matrices(c, progress);
    if (c.out_of_time()) return;  // rows not reached: run again if the shard continues
  }
  c.record.kill_matrix_done = true;
  write_checkpoint(c, true);
}

int run_campaign(const CampaignOptions& o) {
  const InterruptGuard guard;
  Campaign c{o};
  c.start = Campaign::Clock::now();
  c.deadline = c.start + std::chrono::duration_cast<Campaign::Clock::duration>(
                             std::chrono::duration<double>(o.seconds));
  set_up(c);
  start_record(c);
  print_header(c);
  continue_from_report(c);
  write_checkpoint(c, true);
  Progress progress(c.start);
  kill_phase(c, progress);
  run_properties(c, progress);
  conclude(c);
  print_summary(c.record);
  write_reports(c.record, o.json_path, o.junit_path, o.html_path);
  return c.record.exit_code;
}

// --shard-index, --shard-count (tools/shard.h).
void add_shard_options(CLI::App* cmd, ShardOptions& shard) {
  cmd->add_option_function<int>(
      "--shard-index", [&shard](int i) { shard.index = i; },
      "run shard I of --shard-count N: turns I, I+N, I+2N, ... of every property's cases "
      "(default: from GTEST_SHARD_INDEX, JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID; "
      "docs/DISTRIBUTED.md)");
  cmd->add_option_function<int>(
      "--shard-count", [&shard](int n) { shard.count = n; },
      "the number of shards (default: from GTEST_TOTAL_SHARDS, KVCHECK_SHARD_COUNT or "
      "SLURM_ARRAY_TASK_COUNT); `kvcheck merge` adds their reports up");
}

// What a run checks and how much of it: the seed and the budgets.
void add_budget_options(CLI::App* cmd, CampaignOptions& o) {
  cmd->add_option_function<uint64_t>(
         "--seed", [&o](uint64_t s) { o.seed = s, o.seed_given = true; },
         "campaign seed (default: random, printed)")
      ->check(seed_number());
  cmd->add_option("--cases", o.cases,
                  "at most this many cases per property and backend (0: until the time is up); "
                  "a budget the time cuts makes the run incomplete (exit 4)")
      ->check(whole_number(0, std::numeric_limits<int>::max()));
  cmd->add_option("--turn-cases", o.turn_cases,
                  "cases per property and backend before the next one's turn (a slow engine, "
                  "such as llama.cpp at ~1 case/s, needs few so every property gets time)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--scenarios-per-model", o.scenarios_per_model,
                  "scenarios drawn on one generated model before a new one (a backend whose "
                  "model loads dominate a case, such as llama.cpp; docs/PERFORMANCE.md)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--time", o.seconds,
                  "time budget in seconds for the whole run, kill matrix included")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
}

// Where a run writes what it found.
void add_report_options(CLI::App* cmd, CampaignOptions& o) {
  cmd->add_option("--json", o.json_path, "also write the summary as JSON to FILE")
      ->check(report_file());
  cmd->add_option("--junit", o.junit_path,
                  "also write the results as JUnit XML to FILE (one suite per backend, one case "
                  "per property; the kill matrix as a suite per backend)")
      ->check(report_file());
  cmd->add_option("--html", o.html_path,
                  "also write a self-contained HTML report to FILE (docs/REPORTS.md)")
      ->check(report_file());
  cmd->add_option("--failures", o.failures_dir, "folder for case files of failures")
      ->capture_default_str();
}

// The fault kill matrix that runs before the properties.
void add_kill_matrix_options(CLI::App* cmd, CampaignOptions& o) {
  cmd->add_option("--kill-cases", o.kill_cases, "cases per fault in the kill matrix")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--kill-seed", o.kill_seed,
                  "the kill matrix's own seed (fixed, so a build kills the same faults in the "
                  "same cases on every machine; another one tries other cases)")
      ->check(seed_number())
      ->capture_default_str();
  cmd->add_flag("!--no-kill-matrix", o.kill_matrix, "skip the fault kill matrix");
  cmd->add_flag("--kill-per-property", o.kill_per_property,
                "kill matrix per property (which faults each one catches on its own), "
                "not only the 'any' column; much slower");
}

}  // namespace

Action add_campaign(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "campaign",
      "Run the fault kill matrix, then every property on every available backend within a "
      "time budget (the main job). Exit 0 passed, 1 failed, 2 bad input, 4 incomplete, "
      "130/143 interrupted (docs/REPORTS.md)");
  auto o = std::make_shared<CampaignOptions>();
  add_budget_options(cmd, *o);
  cmd->add_option("--property", o->properties, "property name(s) (default: all)")->delimiter(',');
  cmd->add_option(
      "--backend", o->backends,
      "backend string, repeatable: cpu, cpu-reference, cuda, plugin:PATH.so (an engine in a "
      "shared object), exec:'CMD ARGS' (an engine in another process, "
      "docs/ENGINE_PROTOCOL.md), each with [?OPTIONS] (docs/ENGINES.md) (default: the in-tree "
      "engines this machine runs; `kvcheck backends` lists them)");
  cmd->add_option("--reference", o->reference,
                  "P10: compare every backend with this one within the derived bound "
                  "(e.g. --reference cpu); without it, P10 compares each backend with the "
                  "next one given (cpu with cpu-reference by default), and with one backend "
                  "P10 is not run");
  cmd->add_option("--model", o->model,
                  "a Hugging Face checkpoint folder (config.json + model.safetensors, GPT-2 or "
                  "Llama): check the cache on these weights; generators then vary schedules and "
                  "tokens, not the config (docs/MODELS.md)");
  add_report_options(cmd, *o);
  add_kill_matrix_options(cmd, *o);
  cmd->add_option("--shrink-steps", o->shrink_steps,
                  "shrink candidates run per failure (a budget in steps, so a failure shrinks to "
                  "the same case on every machine)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--case-timeout", o->case_timeout,
                  "seconds one case may take before it counts as a hang (the engine's verdict)")
      ->check(CLI::Range(0.1, 1e6))
      ->capture_default_str();
  cmd->add_flag("--in-process", o->in_process,
                "check in-process engines in kvcheck's own process, not in a worker process: a "
                "crash then ends the run (for a debugger)");
  add_shard_options(cmd, o->shard);
  cmd->add_option("--fault", o->fault,
                  "run against an engine with these faults on (names from docs/FAULTS.md, "
                  "comma-separated): shows a property catching them and writes the case file")
      ->capture_default_str();
  return [cmd, o]() {
    if (!cmd->parsed()) return -1;
    o->arguments = command_line();
    return run_campaign(*o);
  };
}

}  // namespace kvcheck::cli
