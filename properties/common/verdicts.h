// How a check states its verdict: every summary starts with the property's
// label and name, so the campaign can group verdicts by their text. One
// place writes that prefix, for passes, failures and "not applicable".
#pragma once

#include <string>
#include <vector>

#include "properties/property.h"
#include "properties/runner.h"

namespace kvcheck::checks {

Verdict start_verdict(Property property);
Verdict not_applicable(Property property, std::string why);
void fail(Verdict& verdict, Location where, const std::string& summary, std::string detail);
void pass(Verdict& verdict, const std::string& what);

// A refusal of a call the scenario's validation allows is the engine's bug.
Verdict engine_refused(Property property, const RunResult& run, const std::string& which_run);

// Fails `verdict` with an error the engine raised: the summary is `lead`
// and, with `quote`, the message's first line; the detail is `label` and the
// whole message; the lines after the first, the engine's trace ("  at ..."
// each, backends/exec/exec_reply.h error_text), also go to verdict.trace.
void fail_engine_error(Verdict& verdict, Location where, const std::string& lead, bool quote,
                       const std::string& label, const std::string& message);

// The texts verdicts share: a chunking as "3+1+2", a double as %.9g.
std::string describe_chunks(const std::vector<int>& chunks);
std::string format_double(double value);

}  // namespace kvcheck::checks
