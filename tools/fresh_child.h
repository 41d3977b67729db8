// A case run again as a replay runs it: on an exec: backend, in an engine
// process started for that run alone, after the case's prelude (the cases a
// failure of an engine that leaks state between cases needs before it). The
// one way the campaign confirms a failure before writing its case file, and
// the way `kvcheck replay` and `kvcheck shrink` run a case with a prelude.
#pragma once

#include <span>
#include <vector>

#include "properties/property.h"
#include "properties/repro/case_file.h"

namespace kvcheck::cli {

// Whether `subject`'s engines live in another process that serves case after
// case (an exec: backend), so that one case may see what an earlier one left
// behind. In-process engines are made anew for every case.
bool serves_many_cases(const EngineUnderTest& subject);

// `subject` on an engine process of its own: for an exec: backend,
// `subject.backend` resolved anew (a fresh child, its handshake and probe, as
// `kvcheck replay` starts one; it ends with the copy), with `subject`'s
// traits and reference; in process, `subject` itself. Throws InputError when
// the backend no longer resolves.
EngineUnderTest fresh_process(const EngineUnderTest& subject);

// Checks each prelude case's property on `fresh`, in order; a prelude case of
// a --model `scenario` runs on its checkpoint.
std::vector<Verdict> run_prelude(const EngineUnderTest& fresh, std::span<const PreludeCase> prelude,
                                 const Scenario& scenario);

struct PreludeRun {
  std::vector<Verdict> prelude;  // [prelude case] its property's verdict
  Verdict verdict;               // the case's
};

// Checks the prelude, then `property` on `scenario`, on one fresh_process.
PreludeRun check_after_prelude(const EngineUnderTest& subject, std::span<const PreludeCase> prelude,
                               Property property, const Scenario& scenario);

}  // namespace kvcheck::cli
