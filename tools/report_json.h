// The run as JSON (docs/REPORTS.md, "JSON"): a campaign's --json, the
// checkpoint a long campaign rewrites as it goes, and `kvcheck merge`'s
// merged report are this one writer's output, from the one RunRecord the
// console, JUnit and HTML reports read. The reader takes a campaign's report
// back into a RunRecord: merge adds shards up from it, and a shard that was
// killed continues from it.
#pragma once

#include <string>

#include "tools/run_report.h"

namespace kvcheck::cli {

// 4: one error/bound histogram of 16 buckets (decades, then tenths of the
// bound) in place of two.
inline constexpr int kReportSchema = 4;

std::string run_json(const RunRecord& run);

// A campaign's JSON report (schema kReportSchema) as a RunRecord, without
// what the JSON does not carry (error maps, cache timelines). Throws
// InputError naming `source` and the key that is missing or wrong.
RunRecord run_from_json(const std::string& text, const std::string& source);

}  // namespace kvcheck::cli
