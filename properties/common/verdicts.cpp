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
  const std::string call = "call " + std::to_string(run.failed_call) + " of " + which_run;
  if (run.threw)
    fail_engine_error(verdict, where, call + ": the engine threw on a valid call: ", true,
                      "exception: ", run.error_message);
  else
    fail_engine_error(verdict, where, call + ": the engine refused a valid call", false,
                      "EngineError: ", run.error_message);
  return verdict;
}

void fail_engine_error(Verdict& verdict, Location where, const std::string& lead, bool quote,
                       const std::string& label, const std::string& message) {
  const size_t end = message.find('\n');
  fail(verdict, where, quote ? lead + message.substr(0, end) : lead, label + message + "\n");
  if (end == std::string::npos) return;
  // "  at FRAME" lines, kept without their indent and marker.
  std::string trace;
  for (size_t at = end + 1; at < message.size();) {
    size_t next = message.find('\n', at);
    if (next == std::string::npos) next = message.size();
    std::string line = message.substr(at, next - at);
    const size_t text = line.find_first_not_of(' ');
    line = text == std::string::npos ? "" : line.substr(text);
    if (line.rfind("at ", 0) == 0) line = line.substr(3);
    if (!line.empty()) trace += line + "\n";
    at = next + 1;
  }
  verdict.trace = trace;
}

}  // namespace kvcheck::checks
