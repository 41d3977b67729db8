// `kvcheck merge REPORT.json... [--json F] [--junit F] [--html F]`: the
// shards of one campaign as one run (tools/merge.h), printed and written by
// the same writers as a campaign's reports. Exit 0 passed, 1 a property
// failed or the kill matrix found a problem, 2 bad input (reports that are
// not shards of one campaign, named), 4 incomplete (a shard missing, killed,
// interrupted or cut by its time budget).
#include <cstdio>

#include "model/status.h"
#include "tools/campaign.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/failure_report.h"
#include "tools/merge.h"
#include "tools/report_json.h"
#include "tools/shard.h"

namespace kvcheck::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string json_path, junit_path, html_path;
  std::string failures_dir = "kvcheck-failures";
};

void print_shards(const RunRecord& merged) {
  std::printf("kvcheck merge: %d shard%s of `%s` (kvcheck %s, commit %s)\n", merged.shard_count,
              merged.shard_count == 1 ? "" : "s", merged.reproduce.c_str(), merged.version.c_str(),
              merged.commit.c_str());
  std::printf("\n%-6s %-12s %9s %9s  %-16s  %s\n", "shard", "status", "cases", "seconds",
              "case digest", "report");
  for (const ShardRecord& s : merged.shards) {
    std::printf("%-6d %-12s %9d %9.1f  %-16s  %s\n", s.index, s.status.c_str(), s.cases, s.seconds,
                s.report.empty() ? "-" : digest_hex(s.digest).c_str(),
                s.report.empty() ? "(none)" : s.report.c_str());
  }
  std::printf("case digest over all shards: %s\n", digest_hex(run_digest(merged)).c_str());
}

int run_merge(const MergeOptions& o) {
  std::vector<ShardReport> reports;
  for (const std::string& path : collect_files(o.inputs, ".json")) {
    reports.push_back({path, run_from_json(read_text_file(path), path)});
  }
  RunRecord merged = merge_reports(reports);
  merged.arguments = command_line();
  gather_case_files(merged, o.failures_dir);
  print_shards(merged);
  for (const FailureRecord& f : merged.failures) {
    std::printf("failure: %s %s on %s (turn %d): %s\n  case file: %s\n",
                std::string(property_label(f.property)).c_str(),
                std::string(property_name(f.property)).c_str(), f.backend.c_str(), f.turn,
                f.verdict.summary.c_str(), f.case_path.empty() ? "(none)" : f.case_path.c_str());
  }
  print_summary(merged);
  write_reports(merged, o.json_path, o.junit_path, o.html_path);
  return merged.exit_code;
}

}  // namespace

Action add_merge(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "merge",
      "Add the JSON reports of a campaign's shards up into one run and one verdict "
      "(docs/DISTRIBUTED.md). Exit 0 passed, 1 failed, 2 bad input, 4 incomplete: a shard "
      "missing, killed or cut by its time budget");
  auto o = std::make_shared<MergeOptions>();
  cmd->add_option("reports", o->inputs,
                  "the shards' --json reports, or folders holding them (searched for *.json)")
      ->required();
  cmd->add_option("--json", o->json_path, "write the merged run as JSON to FILE")
      ->check(cli::report_file());
  cmd->add_option("--junit", o->junit_path, "write the merged run as JUnit XML to FILE")
      ->check(cli::report_file());
  cmd->add_option("--html", o->html_path, "write the merged run as an HTML report to FILE")
      ->check(cli::report_file());
  cmd->add_option("--failures", o->failures_dir,
                  "folder the failures' case files are gathered into (from the reports' text)")
      ->capture_default_str();
  return [cmd, o]() {
    if (!cmd->parsed()) return -1;
    return run_merge(*o);
  };
}

}  // namespace kvcheck::cli
