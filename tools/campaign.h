// `kvcheck campaign`, the main job: the fault kill matrix (a self-test with
// seeds of its own), then every property on every backend until the case
// budget or the time is spent, then the reports.
//
// Its exit code depends only on the engines and the arguments
// (docs/REPORTS.md, "Exit codes"): 0 every property held where it applied
// and every fault was killed; 1 a property failed or a fault survived; 2 bad
// input; 4 incomplete, something with a case or step budget was cut by the
// time budget (and nothing failed); 130 or 143 interrupted.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/kill_matrix.h"
#include "tools/case_history.h"
#include "tools/run_report.h"
#include "tools/shard.h"

namespace kvcheck::cli {

struct CampaignOptions {
  uint64_t seed = 0;
  bool seed_given = false;
  int cases = 0;        // per property and backend; 0 = until the time is up
  int turn_cases = 25;  // cases per property per turn of the round robin
  // Scenarios drawn on one generated model (rcgen::ModelReuse), for a
  // backend whose model loads dominate a case; 1: a new model every case.
  int scenarios_per_model = 1;
  double seconds = 60;  // the whole campaign, kill matrix included
  std::vector<std::string> properties;
  std::vector<std::string> backends;
  std::string json_path;
  std::string junit_path;
  std::string html_path;
  std::string failures_dir = "kvcheck-failures";
  int kill_cases = 200;         // per fault
  uint64_t kill_seed = 0x6b76;  // rcgen::kKillMatrixSeed
  bool kill_matrix = true;
  bool kill_per_property = false;      // every (fault, property) cell, not only 'any'
  int shrink_steps = 2000;             // per failure
  double case_timeout = 120;           // seconds: a case that takes longer is a hang
  bool in_process = false;             // no hunt worker: a crash ends the run (for debuggers)
  std::string fault = "none";          // run the properties against this faulty engine
  std::string reference;               // P10's reference backend; empty: P10 not applicable
  std::string model;                   // --model DIR: a Hugging Face checkpoint; empty: seeded
  ShardOptions shard;                  // --shard-index, --shard-count (tools/shard.h)
  std::vector<std::string> arguments;  // the command line as given, for the reports
};

// What a campaign draws and checks, as (flag, value) pairs: every option that
// changes it, none that only names an output, no shard (two shards of one
// campaign share them).
std::vector<std::pair<std::string, std::string>> campaign_flags(const CampaignOptions& o,
                                                                uint64_t seed);

// The command that runs the same cases again: `kvcheck campaign`, the
// flags, and the shard's own flags when `shard` is one of several.
std::string reproduce_command(const std::vector<std::pair<std::string, std::string>>& flags,
                              const Shard& shard = Shard{});

// What the phases share.
struct Campaign {
  using Clock = std::chrono::steady_clock;
  explicit Campaign(const CampaignOptions& o) : options(o) {}
  const CampaignOptions& options;
  uint64_t seed = 0;
  Shard shard;
  std::vector<Property> properties;
  std::vector<Backend> backends;
  FaultSet faults;
  bool reference_forkable = true;  // P10's reference survives a fork (or there is none)
  std::shared_ptr<const EngineUnderTest> reference;
  std::vector<std::string> reference_specs;  // [backend] P10's reference backend string, or ""
  std::shared_ptr<const Checkpoint> model;
  // [tally] the model genes each property's hunts reuse (--scenarios-per-model).
  std::map<size_t, std::shared_ptr<rcgen::ModelReuse>> model_reuse;
  std::vector<std::shared_ptr<const EngineUnderTest>> subjects;  // [backend]
  // What each backend's engine process has checked (exec: backends), for
  // report_failure to find the cases a failure needs (tools/case_history.h).
  std::vector<CaseHistory> histories;  // [backend]
  Clock::time_point start, deadline;
  RunRecord record;
  double earlier_seconds = 0;        // a continued shard's runs before this one
  Clock::time_point checkpointed{};  // when the report was last written as a checkpoint

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  // The time budget is spent or a signal came: nothing more is started.
  bool out_of_time() const;
  // Hunts of this backend run in a worker process.
  bool isolated(size_t backend) const {
    return !options.in_process && backends[backend].forkable && reference_forkable;
  }
};

// The live progress line on stderr: rewritten in place on a terminal, a line
// every 10 s otherwise (and where `force` asks); stdout is flushed first, so
// that with 2>&1 a progress line never lands before or inside earlier text.
class Progress {
 public:
  explicit Progress(Campaign::Clock::time_point start);
  void update(const std::string& line, bool force = false);
  void done();

 private:
  Campaign::Clock::time_point start_, last_{};
  bool tty_;
};

// The kill matrix on every backend with fault switches: its rows go to the
// record; a fault that survived or a failing correct engine fails the run.
void run_kill_matrices(Campaign& c, Progress& progress);

// The kill matrix's options for a backend, as a campaign sets them (and
// `kvcheck kill-matrix`, so that both print the same matrix): `cases` per
// fault and for the correct engine, `shrink_steps` per shrink.
rcgen::KillMatrixOptions kill_matrix_options(const Backend& backend, uint64_t seed, int cases,
                                             int shrink_steps, bool per_property);

// The properties, turn by turn, on every backend: tallies and failures go to
// the record.
void run_properties(Campaign& c, Progress& progress);

// The summary table, the not-applicable reasons and the final line (a
// campaign's, or the merged run of `kvcheck merge`).
void print_summary(const RunRecord& r);

// --json, --junit and --html, each from `r` when its path is not empty (the
// options' cli::report_file() checked the paths before the run: a typo found
// after an hour's campaign loses the hour).
void write_reports(const RunRecord& r, const std::string& json, const std::string& junit,
                   const std::string& html);

// Rewrites --json as a checkpoint of the run so far (status "running"), at
// most every few seconds unless `now`: what a killed shard leaves behind,
// and where it continues (tools/campaign_continue.cpp).
void write_checkpoint(Campaign& c, bool now);

// Continues the run from the report at --json when that report is this
// campaign's and shard's, left unfinished (killed, interrupted, or cut by
// the time): its tallies, failures and kill matrix are taken over and only
// the turns it did not finish run. Says on the console which it does.
void continue_from_report(Campaign& c);

}  // namespace kvcheck::cli
