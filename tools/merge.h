// `kvcheck merge`: the shards of one campaign, added up into one run with one
// verdict (docs/DISTRIBUTED.md). Counts and digests sum, worst ratios take
// the maximum, coverage and proof of use add up, the kill matrix is shard
// 0's, failures are deduplicated by their case's content. A shard that is
// missing, was killed, interrupted or cut by its time budget is listed and
// makes the merged run incomplete: never passed for what did not run.
#pragma once

#include <string>
#include <vector>

#include "tools/run_report.h"

namespace kvcheck::cli {

struct ShardReport {
  std::string path;
  RunRecord run;  // run_from_json
};

// Refuses (InputError) reports of different builds, seeds, options or shard
// counts, naming the difference and both files, and two reports of one
// shard. The merged record's command is "merge", its status and exit code
// those of docs/REPORTS.md (0 passed, 1 failed, 4 incomplete).
RunRecord merge_reports(const std::vector<ShardReport>& reports);

// Writes every failure's case file (its text, carried by the report) into
// `folder` and points the failure at it; one file per distinct case.
// Throws InputError when the folder cannot be written.
void gather_case_files(RunRecord& merged, const std::string& folder);

}  // namespace kvcheck::cli
