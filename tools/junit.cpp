// The JUnit writer (tools/junit.h): suites and cases from the RunRecord.
#include "tools/junit.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <vector>

#include "tools/reason_ranges.h"

namespace kvcheck::cli {

namespace {

struct Case {
  std::string classname, name;
  double seconds = 0;
  enum class Kind { kPassed, kFailed, kSkipped, kError } kind = Kind::kPassed;
  std::string message, text;  // failure or skip message; failure body
};

struct Suite {
  std::string name;
  std::vector<Case> cases;
  std::string system_out;  // the backend's proof-of-use warnings, a line each
};

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", s);
  return text;
}

std::string hostname() {
  char name[256] = "localhost";
  if (gethostname(name, sizeof(name)) != 0) return "localhost";
  name[sizeof(name) - 1] = '\0';
  return name;
}

const FailureRecord* failure_of(const RunRecord& run, const Tally& t) {
  for (const FailureRecord& f : run.failures) {
    if (f.property == t.property && f.backend == t.backend) return &f;
  }
  return nullptr;
}

std::string failure_text(const FailureRecord* f, const Tally& t) {
  std::ostringstream out;
  if (f == nullptr) return t.failure + "\n";
  out << "case file: " << (f->case_path.empty() ? "(not written)" : f->case_path) << "\n";
  if (!f->case_path.empty()) out << "replay: " << replay_command(*f) << "\n";
  out << f->verdict.summary << "\n" << f->verdict.detail;
  return out.str();
}

std::string not_applicable_message(const Tally& t) {
  std::string why;
  for (const ReasonGroup& g : group_reasons(t.not_applicable_why)) {
    why += (why.empty() ? "" : "; ") + g.text;
  }
  return "not applicable: " + why;
}

Case property_case(const RunRecord& run, const Tally& t) {
  Case c;
  c.classname = "kvcheck." + t.backend;
  c.name = std::string(property_label(t.property)) + " " + std::string(property_name(t.property));
  c.seconds = t.seconds;
  if (t.failed) {
    c.kind = Case::Kind::kFailed;
    c.message = t.failure;
    c.text = failure_text(failure_of(run, t), t);
  } else if (not_run(t)) {
    c.kind = Case::Kind::kSkipped;
    c.message = t.not_applicable > 0 ? not_applicable_message(t) : "not run: " + not_run_reason(t);
  }
  return c;
}

// `kvcheck merge`: a shard that did not finish is an error, so that a CI
// page that reads only the JUnit never shows its missing cases as passed.
Case shard_case(const ShardRecord& s, int count) {
  Case c;
  c.classname = "kvcheck.shards";
  c.name = "shard " + std::to_string(s.index) + " of " + std::to_string(count);
  c.seconds = s.seconds;
  if (s.status != "passed" && s.status != "failed") {
    c.kind = Case::Kind::kError;
    c.message = s.status == "missing"
                    ? "no report (missing)"
                    : s.status + ": it did not finish its cases (" + s.report + ")";
  }
  return c;
}

Case kill_case(const KillRecord& k) {
  Case c;
  c.classname = "kvcheck.kill-matrix." + k.backend;
  c.name = k.fault;
  if (!k.ok()) {
    c.kind = Case::Kind::kFailed;
    c.message = k.problems.front().substr(0, k.problems.front().find('\n'));
    for (const std::string& p : k.problems) c.text += p + "\n";
    c.text += k.shrunk_scenario;
  }
  return c;
}

void write_suite(std::ostringstream& out, const Suite& s, const std::string& started,
                 const std::string& host) {
  int failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  for (const Case& c : s.cases) {
    failures += c.kind == Case::Kind::kFailed;
    errors += c.kind == Case::Kind::kError;
    skipped += c.kind == Case::Kind::kSkipped;
    seconds += c.seconds;
  }
  out << "  <testsuite name=\"" << escape_xml(s.name) << "\" tests=\"" << s.cases.size()
      << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
      << "\" time=\"" << seconds_text(seconds) << "\" timestamp=\"" << started << "\" hostname=\""
      << escape_xml(host) << "\">\n";
  for (const Case& c : s.cases) {
    out << "    <testcase classname=\"" << escape_xml(c.classname) << "\" name=\""
        << escape_xml(c.name) << "\" time=\"" << seconds_text(c.seconds) << "\"";
    if (c.kind == Case::Kind::kPassed) {
      out << "/>\n";
      continue;
    }
    out << ">\n";
    if (c.kind == Case::Kind::kSkipped) {
      out << "      <skipped message=\"" << escape_xml(c.message) << "\"/>\n";
    } else if (c.kind == Case::Kind::kError) {
      out << "      <error message=\"" << escape_xml(c.message) << "\" type=\"incomplete\"/>\n";
    } else {
      out << "      <failure message=\"" << escape_xml(c.message) << "\" type=\"property\">"
          << escape_xml(c.text) << "</failure>\n";
    }
    out << "    </testcase>\n";
  }
  if (!s.system_out.empty()) {
    out << "    <system-out>" << escape_xml(s.system_out) << "</system-out>\n";
  }
  out << "  </testsuite>\n";
}

}  // namespace

std::string junit_xml(const RunRecord& run) {
  std::vector<Suite> suites;
  for (const BackendRecord& b : run.backends) {
    Suite s{b.spec, {}, {}};
    for (const Tally& t : run.tallies) {
      if (t.backend == b.spec) s.cases.push_back(property_case(run, t));
    }
    for (const std::string& w : feature_warnings(run.tallies, b))
      s.system_out += "warning: " + w + "\n";
    suites.push_back(std::move(s));
  }
  for (const BackendRecord& b : run.backends) {
    Suite s{"kill-matrix " + b.spec, {}, {}};
    for (const KillRecord& k : run.kills) {
      if (k.backend == b.spec) s.cases.push_back(kill_case(k));
    }
    if (!s.cases.empty()) suites.push_back(std::move(s));
  }
  if (!run.shards.empty()) {
    Suite s{"shards", {}, {}};
    for (const ShardRecord& shard : run.shards)
      s.cases.push_back(shard_case(shard, run.shard_count));
    suites.push_back(std::move(s));
  }
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  for (const Suite& s : suites) {
    for (const Case& c : s.cases) {
      ++tests;
      failures += c.kind == Case::Kind::kFailed;
      errors += c.kind == Case::Kind::kError;
      skipped += c.kind == Case::Kind::kSkipped;
    }
  }
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"kvcheck " << escape_xml(run.command) << "\" tests=\"" << tests
      << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
      << "\" time=\"" << seconds_text(run.seconds) << "\">\n";
  const std::string host = hostname();
  for (const Suite& s : suites) write_suite(out, s, run.started, host);
  out << "</testsuites>\n";
  return out.str();
}

}  // namespace kvcheck::cli
