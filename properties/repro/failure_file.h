// Failures become files: every driver (ctest/RapidCheck, kvcheck campaign,
// fuzz targets) hands its minimized failing scenario here, and gets back the
// path of a case file plus the lines to print (path, replay command,
// reproduce string).
//
// Files are written atomically and never overwritten: the text goes to a
// temporary file in the same folder, which is then hard-linked to its final
// name (link fails instead of replacing), so a run killed mid-write leaves at
// most a stray ".tmp" file and never a torn case.
#pragma once

#include <string>
#include <vector>

#include "engine/faults.h"
#include "model/status.h"
#include "properties/property.h"
#include "properties/repro/case_file.h"
#include "properties/scenario.h"

namespace kvcheck {

struct FailureContext {
  // Where case files go; empty: $KVCHECK_FAILURES, else "kvcheck-failures".
  std::string failures_dir;
  std::string backend;    // backend string it failed on ("cpu", "plugin:x.so"); may be empty
  std::string engine;     // the engine's identity, "name version"; may be empty
  std::string reference;  // P10's reference backend string; empty for the other properties
  std::string found_by;   // e.g. "kvcheck campaign --seed 5", "ctest Properties.P1Oracle"
  std::string reproduce;  // RapidCheck reproduce string or command; may be empty
  std::string kvcheck_command = "kvcheck";  // how the printed replay command names the CLI
  std::vector<std::string> notes;           // more one-line remarks for the case file
  // Cases the failure needs before it in the same fresh engine process (a
  // state leak between cases); empty for most failures.
  std::vector<PreludeCase> prelude;
};

struct WrittenCase {
  bool ok = false;
  std::string path;               // set when ok
  bool already_recorded = false;  // an identical file was already there; nothing written
  std::string error;              // set when not ok
  std::string report;             // lines for the run to print (the error too)
};

// The case a failing verdict makes: the scenario, property, faults, backend,
// the verdict itself and a note saying who found it.
CaseFile failure_case(const Scenario& scenario, const Verdict& verdict, FaultSet faults,
                      const FailureContext& context);

// "P6-cache_state-shared_layer_cache-1a2b3c4d": property, fault and a digest
// of the scenario, so the same failure found twice gets the same name.
std::string case_file_stem(Property property, FaultSet faults, const Scenario& scenario);

// The folder failures go to when the context names none.
std::string default_failures_dir();

// Writes failure_case(...) as <dir>/<stem>.case (or <stem>-2.case, ... when a
// different file holds the name) and builds the report. Never throws.
WrittenCase write_failure_case(const Scenario& scenario, const Verdict& verdict, FaultSet faults,
                               const FailureContext& context);

// Writes `text` to a new file <dir>/<stem><suffix> atomically, creating the
// folder, choosing "<stem>-2<suffix>", "-3", ... when a different file holds
// the name. When a file with exactly this text is already there, returns its
// path with *already = true. Returns the path or an error naming it.
Result<std::string> write_new_file(const std::string& dir, const std::string& stem,
                                   const std::string& suffix, const std::string& text,
                                   bool* already = nullptr);

}  // namespace kvcheck
