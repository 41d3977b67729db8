// parse(print(c)) == c over generated cases: every Scenario the generators
// make, every property, any fault set, notes, backends, recorded verdicts and
// preludes.
#include <gtest/gtest.h>

#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "properties/rc/generators.h"
#include "properties/repro/case_file.h"

namespace kvcheck::test {
namespace {

// One-line text as a case file keeps it (one_line): printable ASCII.
rc::Gen<std::string> line_text() {
  return rc::gen::map(rc::gen::container<std::string>(rc::gen::inRange<char>(' ', '~' + 1)),
                      [](const std::string& s) { return one_line(s); });
}

rc::Gen<int> location_field() {
  return rc::gen::oneOf(rc::gen::just(-1), rc::gen::inRange(0, 1000));
}

rc::Gen<CaseFile> case_files() {
  return rc::gen::exec([] {
    CaseFile c;
    c.scenario = *rcgen::scenario();
    c.property = static_cast<Property>(*rc::gen::inRange(0, kPropertyCount));
    for (int i = 0; i < kFaultCount; ++i) {
      if (*rc::gen::inRange(0, 8) == 0) c.faults = c.faults.with(static_cast<Fault>(i));
    }
    c.backend = *rc::gen::element<std::string>("", "cpu", "cpu-reference", "cuda");
    c.notes = *rc::gen::container<std::vector<std::string>>(line_text());
    c.has_verdict = *rc::gen::arbitrary<bool>();
    if (c.has_verdict) {
      c.verdict.outcome =
          *rc::gen::element(RecordedVerdict::Outcome::kPassed, RecordedVerdict::Outcome::kFailed,
                            RecordedVerdict::Outcome::kNotApplicable);
      Location& w = c.verdict.where;
      w.call = *location_field(), w.sequence = *location_field(), w.position = *location_field();
      w.layer = *location_field(), w.kv_head = *location_field();
      if (*rc::gen::arbitrary<bool>()) {
        w.first_bad_position = *rc::gen::inRange(0, 100);
        w.last_bad_position = *rc::gen::inRange(0, 100);
      }
      c.verdict.summary = *line_text();
    }
    // A prelude in one case of four, of up to three cases.
    if (*rc::gen::inRange(0, 4) == 0) {
      for (int n = *rc::gen::inRange(1, 4); n > 0; --n) {
        c.prelude.push_back(
            {static_cast<Property>(*rc::gen::inRange(0, kPropertyCount)), *rcgen::scenario()});
      }
    }
    return c;
  });
}

RC_GTEST_PROP(CaseFileRoundTrip, ParseOfPrintIsIdentity, ()) {
  const CaseFile c = *case_files();
  const std::string text = print_case(c);
  const Result<CaseFile> parsed = parse_case(text);
  RC_ASSERT(parsed.ok());
  RC_ASSERT(parsed.value() == c);
  RC_ASSERT(print_case(parsed.value()) == text);
}

// Any one line of a printed case replaced by junk: a clean error naming a
// line, or a case that prints back to a fixed point. Never a crash.
RC_GTEST_PROP(CaseFileRoundTrip, DamagedLinesGiveLineNumberedErrors, ()) {
  const std::string text = print_case(*case_files());
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  const size_t victim = *rc::gen::inRange<size_t>(0, lines.size());
  lines[victim] =
      *rc::gen::oneOf(rc::gen::just(std::string()), rc::gen::arbitrary<std::string>(),
                      rc::gen::map(rc::gen::inRange(0, 1 << 20),
                                   [&](int n) { return lines[victim] + " " + std::to_string(n); }),
                      rc::gen::just(lines[victim].substr(0, lines[victim].size() / 2)));
  std::string damaged;
  for (const std::string& line : lines) damaged += line + "\n";
  const Result<CaseFile> parsed = parse_case(damaged);
  if (!parsed.ok()) {
    RC_ASSERT(!parsed.error().empty());
    RC_ASSERT(parsed.error().rfind("line ", 0) == 0 ||
              parsed.error().rfind("at the end of the file (line ", 0) == 0);
  } else {
    RC_ASSERT(parsed.value().scenario.validate().empty());
    const std::string printed = print_case(parsed.value());
    RC_ASSERT(print_case(parse_case(printed).value()) == printed);
  }
}

}  // namespace
}  // namespace kvcheck::test
