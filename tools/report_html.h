// `kvcheck campaign --html FILE` and `kvcheck replay --html FILE`: one
// self-contained HTML page (inline CSS and SVG; no scripts, fonts or URLs)
// for a person triaging a run: the run and its backends, per property and
// backend the cases with an error/bound histogram, coverage, the kill matrix
// as a heat map, and every failure with its case file and localisation.
// docs/REPORTS.md shows one and lists what it does not show yet.
#pragma once

#include <string>

#include "tools/run_report.h"

namespace kvcheck::cli {

std::string html_report(const RunRecord& run);

}  // namespace kvcheck::cli
