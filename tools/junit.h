// `kvcheck campaign --junit FILE`: the run as JUnit XML for CI systems.
//
// Shape (the subset of the Jenkins / Ant JUnit XSD that CI parsers read,
// see docs/REPORTS.md): <testsuites> holding one <testsuite> per backend
// (one <testcase> per property) and one "kill-matrix <backend>" suite per
// backend that ran the matrix (one <testcase> per fault, plus the correct
// engine). A property whose every case was not applicable is <skipped
// message="why"/>; a failure is <failure message="summary"> with the case
// file's path and the localisation as text. tests/failures/errors/skipped/
// time on every suite are the sums of its cases.
#pragma once

#include <string>

#include "tools/run_report.h"

namespace kvcheck::cli {

std::string junit_xml(const RunRecord& run);

}  // namespace kvcheck::cli
