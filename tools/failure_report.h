// What the CLI does with failures and case files: a failing campaign writes
// its minimized scenario as a case file and prints how to replay it; replay
// and shrink share the case-file plumbing (finding files, choosing the engine
// a case runs on).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/hunt.h"
#include "properties/repro/case_file.h"
#include "tools/backends.h"

namespace kvcheck::cli {

// Prints the failure (seed, minimized scenario, localization), writes it as a
// case file into `failures_dir` and prints the path and the replay command.
// Returns the case file's path ("" when none was written).
std::string report_failure(const rcgen::HuntResult& result, Property property,
                           const Backend& backend, FaultSet faults, uint64_t seed,
                           const std::string& failures_dir);

// Every case file the arguments name: files as given, folders searched
// recursively for *.case, sorted. Throws InputError for a path that does not
// exist or a folder without case files.
std::vector<std::string> collect_case_files(const std::vector<std::string>& paths);

// Parses a --fault value: "none" or names separated by commas. Throws
// InputError naming the unknown fault.
FaultSet parse_fault_option(const std::string& text);

// The engine a case runs on: the --backend override, else the backend the
// case recorded, else "cpu"; the faults of --fault when given, else the
// case's.
// A plugin or command named only by the case file is never started (a case
// from a bug report must not run code): that is an InputError asking for
// --backend.
struct CaseEngine {
  Backend backend;
  FaultSet faults;
  EngineUnderTest subject;
};
CaseEngine case_engine(const CaseFile& c, const std::string& backend_override,
                       const std::optional<FaultSet>& fault_override,
                       const std::string& reference = "");

}  // namespace kvcheck::cli
