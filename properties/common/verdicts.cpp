// The verdict helpers (verdicts.h says why they are shared).
#include "properties/common/verdicts.h"

#include <cstdio>
#include <utility>

namespace kvcheck::checks {

std::string describe_chunks(const std::vector<int>& chunks) {
  std::string text;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) text += "+";
    text += std::to_string(chunks[i]);
  }
  return text.empty() ? "(none)" : text;
}

std::string format_double(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

Verdict start_verdict(Property property) {
  Verdict verdict;
  verdict.property = property;
  return verdict;
}

Verdict not_applicable(Property property, std::string why) {
  Verdict verdict = start_verdict(property);
  verdict.applicable = false;
  verdict.summary = std::string(property_label(property)) + " " +
                    std::string(property_name(property)) + ": not applicable: " + why;
  return verdict;
}

void fail(Verdict& verdict, Location where, const std::string& summary, std::string detail) {
  verdict.passed = false;
  verdict.where = where;
  verdict.summary = std::string(property_label(verdict.property)) + " " +
                    std::string(property_name(verdict.property)) + ": " + summary;
  verdict.detail = std::move(detail);
}

void pass(Verdict& verdict, const std::string& what) {
  verdict.summary = std::string(property_label(verdict.property)) + " " +
                    std::string(property_name(verdict.property)) + ": passed: " + what;
}

Verdict engine_refused(Property property, const RunResult& run, const std::string& which_run) {
  Verdict verdict = start_verdict(property);
  Location where;
  where.call = run.failed_call;
  fail(verdict, where,
       "call " + std::to_string(run.failed_call) + " of " + which_run +
           (run.threw ? ": the engine threw on a valid call: " + run.error_message
                      : std::string(": the engine refused a valid call")),
       (run.threw ? "exception: " : "EngineError: ") + run.error_message + "\n");
  return verdict;
}

}  // namespace kvcheck::checks
