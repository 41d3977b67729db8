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
#include "tools/case_history.h"

namespace kvcheck::cli {

// Prints the failure (seed, minimized scenario, localization), writes it as a
// case file into `failures_dir` and prints the path and the replay command.
// Returns the case file's path ("" when none was written).
//
// On an exec: backend the minimized case first runs again in a fresh engine
// process (tools/leak_search.h): a case that fails there is written with that
// run's verdict; one that passes there is a state leak between cases, written
// with the shortest prelude of `history`'s cases found to make it fail again,
// and not written at all when none does (or when there is no `history`). The
// history is the record of every check the run made on `backend`'s engines
// (CaseHistory::record after each); the fresh processes take its subject's
// traits and P10 reference.
// `reference` is P10's reference backend string, recorded in a P10 case.
std::string report_failure(const rcgen::HuntResult& result, Property property,
                           const Backend& backend, FaultSet faults, uint64_t seed,
                           const std::string& failures_dir, const CaseHistory* history = nullptr,
                           const std::string& reference = "");

// Every file the arguments name: files as given, folders searched
// recursively for names ending in `extension` (".case", ".json"), sorted.
// Throws InputError for a path that does not exist or a folder without such
// files.
std::vector<std::string> collect_files(const std::vector<std::string>& paths,
                                       const std::string& extension);
// Every case file the arguments name (collect_files for ".case").
inline std::vector<std::string> collect_case_files(const std::vector<std::string>& paths) {
  return collect_files(paths, ".case");
}

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
  bool in_process = false;  // --in-process: no forked process per check (for a debugger)
};
// P10's reference: `reference` when given, else the one the case records
// (under the same rule as its backend: never a plugin or a command).
CaseEngine case_engine(const CaseFile& c, const std::string& backend_override,
                       const std::optional<FaultSet>& fault_override,
                       const std::string& reference = "");

// One property on one scenario as replay and shrink check a case: for an
// in-process engine that survives a fork, in a process of its own, so that a
// crash, abort or hang is the verdict (as the campaign records it) and not
// the end of kvcheck; directly otherwise, or with `engine.in_process`.
Verdict check_case(const CaseEngine& engine, Property property, const Scenario& scenario);

}  // namespace kvcheck::cli
