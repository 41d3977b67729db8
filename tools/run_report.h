// What a campaign (or a replay) found, as data: the console table, the JSON,
// the JUnit XML (tools/junit.h) and the HTML report (tools/report_html.h) are
// all written from this one record, so their counts cannot disagree.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/traits.h"
#include "properties/property.h"
#include "tools/cache_timeline.h"
#include "tools/error_map.h"

namespace kvcheck::cli {

// Exit codes (docs/REPORTS.md): 0 passed, 1 failed, 2 bad input, 4
// incomplete (a budget the time cut, a shard that did not finish).
inline constexpr int kExitIncomplete = 4;

// The one error/bound histogram (P1, P6, and the bounded invariances whose
// runs differed): [0, 1e-6), decades [1e-6, 1e-5) .. [0.01, 0.1), tenths
// [0.1, 0.2) .. [0.9, 1), and [1, inf) where a case failed. Decades, since
// passing ratios spread over orders of magnitude (an exact engine sits far
// left); tenths near the bound, where a derived bound is judged
// (docs/TOLERANCE.md's histograms).
inline constexpr int kRatioBuckets = 16;
inline constexpr int kRatioFirstTenth = 6;   // the bucket [0.1, 0.2)
int ratio_bucket(double ratio);              // 0 .. kRatioBuckets-1
std::string ratio_bucket_label(int bucket);  // "<1e-6", "1e-6", .., "0.01", "0.1", .., "0.9", ">=1"
bool has_error_bound(Property p);            // P1 and P6 measure error/bound

// Proof of use (properties/feature_use.h): cases that could use a cache
// feature (drawn) and cases in which the engine said it did (used).
struct FeatureCount {
  int drawn = 0, used = 0;
};

// Tallies for one (property, backend) pair.
struct Tally {
  Property property = Property::kOracle;
  std::string backend;
  size_t backend_index = 0;  // into the campaign's backends
  // cases = applied + not_applicable; passed counts the applied cases that
  // held (a failing case is applied and not passed).
  int cases = 0, passed = 0, not_applicable = 0;
  // Why the property applies to no case on this backend, from its traits
  // (never_applicable): it was not run at all.
  std::string never_applies;
  double worst_ratio = 0;
  // [bucket] applicable cases compared within a bound, by their worst error/bound
  std::array<int, kRatioBuckets> ratio_histogram{};
  std::map<std::string, int> coverage;            // class -> cases
  std::map<std::string, int> not_applicable_why;  // reason -> cases
  std::map<std::string, FeatureCount> features;   // feature -> cases
  double seconds = 0;                             // time spent on this pair, shrinking included
  bool failed = false;
  std::string failure;  // summary of the shrunk failure
  // Sharding (tools/shard.h): the digest of every case (a sum of shares, so
  // shards add up), the turns of this pair that ran to their end, and the
  // campaign-wide number of the turn whose hunt failed (-1: none).
  uint64_t digest = 0;
  int turns = 0;
  int first_failing_turn = -1;
};

// Adds `from`'s cases to `into` (the same pair: a turn, or another shard):
// counts and digests sum, the worst ratio is the larger, and the failure is
// the one of the earlier failing turn.
void add_tally(Tally& into, const Tally& from);

inline int applied(const Tally& t) {
  return t.cases - t.not_applicable;
}
// Not one case was checked: never applicable here, no case ran, or every
// case was not applicable. JUnit "skipped", never "passed".
inline bool not_run(const Tally& t) {
  return !t.failed && applied(t) == 0;
}
// Why, in words ("" when it ran).
std::string not_run_reason(const Tally& t);

// One backend's coverage over all its properties' cases: the cases, and per
// scenario class the cases that hold it. The console, JSON and HTML reports
// all print this.
struct BackendCoverage {
  int cases = 0;
  std::map<std::string, int> classes;  // class -> cases
};
BackendCoverage backend_coverage(const std::vector<Tally>& tallies, const std::string& backend);

// One failure: the case file written for it and the verdict's localisation.
struct FailureRecord {
  Property property = Property::kOracle;
  std::string backend;
  std::string faults;     // the faults the engine ran with
  std::string case_path;  // empty when no case file could be written
  std::string case_text;  // the case file's text
  Verdict verdict;
  std::vector<ErrorMap> error_maps;  // P1's, or P6's K and V; empty: none
  CacheTimeline timeline;            // recorded only for the HTML report
  int turn = -1;                     // the campaign-wide turn whose hunt found it
};

// The content hash of a case file: its text less comments and notes (which
// name the hunt seed that found it), so the same shrunk case found by two
// shards hashes the same. 16 hex digits.
std::string case_content_hash(const std::string& case_text);

// "kvcheck replay [--backend ...] CASE_PATH": what replays the failure's
// case file, with the options its backend, reference or model need (from
// the case's text); "" when no case file was written.
std::string replay_command(const FailureRecord& f);

// One kill-matrix row on one backend. Columns are the properties, or the
// single 'any' column (every property per case) when the matrix ran so.
struct KillRecord {
  std::string backend;
  std::string fault;  // fault name, or "(correct engine)"
  bool is_fault = true;
  bool ran = true;
  bool killed = false;
  int cases_to_kill = 0;  // cases run until the kill (or all of them)
  std::string killed_by;  // property name of the smallest shrunk case
  int shrunk_size = 0;
  std::string shrunk_scenario;
  // What the kill-matrix gate holds against this row (KillMatrix::problems:
  // a surviving fault, a row not reached, a shrink over its target, a
  // failing correct engine). Empty: the row passes.
  std::vector<std::string> problems;
  std::vector<std::string> notes;  // shrink quality: reported, never failing a campaign
  bool ok() const { return problems.empty(); }
  // One property's own column, when the matrix ran per property.
  struct Cell {
    Property property = Property::kOracle;
    bool killed = false;
    int cases = 0;  // until the kill, or all that ran
    int shrunk_size = 0;
  };
  std::vector<Cell> cells;  // [property]; empty when only 'any' ran
};

struct BackendRecord {
  std::string spec;
  std::string traits;          // traits_summary text, one group a line
  FeatureMask observable = 0;  // the cache features it declares and lets be observed
  EngineTraits declared;       // what it declares (the JSON report carries these)
  bool isolated = false;       // checked in a worker process
};

// One shard's report as `kvcheck merge` found it.
struct ShardRecord {
  int index = 0;
  std::string report;  // its path; empty: missing
  std::string status;  // its status, "missing", or "killed" (a checkpoint)
  int cases = 0;
  double seconds = 0;
  uint64_t digest = 0;
};

struct RunRecord {
  std::string command;                 // "campaign", "replay" or "merge"
  std::string version, commit;         // the build that ran it (tools/build_info.h)
  std::vector<std::string> arguments;  // the command line as given
  // What a campaign draws and checks, as (flag, value) pairs (value "" for
  // a flag alone): reproduce_command's flags less the shard's. Two shards
  // of one campaign hold the same.
  std::vector<std::pair<std::string, std::string>> options;
  int shard_index = 0, shard_count = 1;
  std::string shard_source;            // tools/shard.h; empty: not sharded
  std::string model_path, model_hash;  // --model; empty: seeded models
  unsigned long long seed = 0;
  bool has_seed = false;
  std::string reproduce;  // the command that re-runs it
  std::string faults;     // "none" or the faults on
  std::string started;    // UTC, ISO 8601
  double seconds = 0;
  bool passed = true;
  // "passed", "failed", "incomplete" (a budget was cut, nothing failed) or
  // "interrupted" (a signal ended it); the exit code follows from it.
  std::string status = "passed";
  int exit_code = 0;
  std::vector<std::string> incomplete;  // what the time budget cut, a line each
  std::vector<std::string> notes;       // reported, never failing: shrink sizes over target
  std::string outcome;                  // the final console line
  std::vector<BackendRecord> backends;
  std::vector<Tally> tallies;  // campaign only
  std::vector<KillRecord> kills;
  int kill_cases = 0;  // cases per fault: the kill matrix's colour scale ends there
  unsigned long long kill_seed = 0;
  bool kill_matrix_done = false;  // the kill matrix ran to its end (or had nothing to run)
  std::vector<FailureRecord> failures;
  std::vector<FailureRecord> replayed;  // replay only: every verdict, passed ones too
  std::vector<ShardRecord> shards;      // merge only: [shard index]
};

// The status, exit code and outcome from what the record holds: failed (1)
// when a property failed or the kill matrix found a problem, else
// incomplete (4) when `incomplete` lists something (`incomplete_outcome`
// says what), else passed (0). `faults_on`: the engines ran with faults.
void decide_verdict(RunRecord& r, bool faults_on, const std::string& incomplete_outcome);

// The digest over every case of the run (tools/shard.h): its tallies' sum.
uint64_t run_digest(const RunRecord& run);

// "" when `a` and `b` are reports of one campaign (build, command, seed,
// options, shard count, model), else the first difference, each side named
// by its report ("--cases: 100 in a.json, 200 in b.json").
std::string campaign_difference(const RunRecord& a, const std::string& a_name, const RunRecord& b,
                                const std::string& b_name);

// One backend's proof of use: per feature (feature_rows() order) whether it
// declares it, the cases that could use it and those in which it did.
struct FeatureUseRow {
  std::string name;
  bool declared = false;
  FeatureCount count;
};
std::vector<FeatureUseRow> backend_feature_use(const std::vector<Tally>& tallies,
                                               const BackendRecord& backend);
// A line per declared feature that never happened on a backend that ran
// cases ("cpu declares prefix hit, yet it happened in none of its 4,210
// cases that could use it"): every report prints them.
std::vector<std::string> feature_warnings(const std::vector<Tally>& tallies,
                                          const BackendRecord& backend);
std::vector<std::string> feature_warnings(const RunRecord& run);  // every backend's

std::string utc_now_iso8601();

// Text for XML/HTML content and attribute values: & < > " ' escaped, and
// control characters XML 1.0 forbids replaced by U+FFFD (a case file or an
// exception text may hold anything).
std::string escape_xml(const std::string& text);

// The whole file ("" when it cannot be read: the report shows what it has).
std::string read_text_file(const std::string& path);

// Writes `text` to `path` (replacing it); throws InputError naming `option`
// and the path when it cannot.
void write_text_file(const std::string& option, const std::string& path, const std::string& text);

}  // namespace kvcheck::cli
