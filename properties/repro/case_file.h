// Case files: a failure (or a hand-written check) as versioned text that a
// person can read and edit, and that replay, shrink and the regression corpus
// all read back. The format is specified in docs/CASE_FORMAT.md.
//
// The parser is a pure function from text to case-or-error so that libFuzzer
// can drive it: it never asserts on its input, bounds every size it allocates
// from the input, and reports the first problem with its line number and what
// was expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/faults.h"
#include "model/command_text.h"
#include "model/status.h"
#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck {

// The verdict a case recorded when it was written: what was seen, so that a
// replay can say whether it still sees the same.
struct RecordedVerdict {
  enum class Outcome : uint8_t { kPassed, kFailed, kNotApplicable };
  Outcome outcome = Outcome::kFailed;
  Location where;
  std::string summary;  // one line; see one_line()
  // The engine's trace (Verdict::trace), written as comment lines after the
  // summary: for the reader, never read back and never compared (an edit of
  // the engine's file moves its lines, not the verdict).
  std::string trace;

  bool operator==(const RecordedVerdict& other) const;
};

// A case run before the case itself, in the same fresh engine process: a
// failure of an engine that leaks state from one case to the next shows only
// after them (docs/CASE_FORMAT.md, "Prelude"). It runs on the case's backend,
// faults and checkpoint, and records no verdict.
struct PreludeCase {
  Property property = Property::kOracle;
  Scenario scenario;

  bool operator==(const PreludeCase&) const = default;
};

struct CaseFile {
  Scenario scenario;
  Property property = Property::kOracle;
  FaultSet faults;  // the fault switches that were on ("none" when empty)
  std::string
      backend;         // the backend string it was seen on ("cpu", "plugin:x.so?..."); may be empty
  std::string engine;  // the engine's declared identity, "name version"; may be empty
  // P10: the backend string of the reference engine it was compared with;
  // empty for the other properties.
  std::string reference;
  // A --model case: the checkpoint folder and the hash of its files
  // ("fnv1a64:<16 hex digits>"); both empty for seeded weights. The
  // scenario's config is the checkpoint's; replay needs --model to run it.
  std::string model_path;
  std::string model_hash;
  std::vector<std::string> notes;  // free one-line remarks, kept in order
  bool has_verdict = false;
  RecordedVerdict verdict;           // meaningful when has_verdict
  std::vector<PreludeCase> prelude;  // [case] run first, oldest first; empty for most cases

  bool operator==(const CaseFile&) const = default;
};

// Limits on what a case file may ask the parser to hold. They are far above
// any case kvcheck writes (minimized cases have tens of tokens) and keep a
// hostile file from allocating more than a few megabytes.
inline constexpr size_t kMaxCaseBytes = size_t{4} << 20;
inline constexpr int kMaxCaseSequences = 1024;
inline constexpr int kMaxCaseTokens = 1 << 18;  // over all sequences
inline constexpr int kMaxCaseCalls = 1 << 16;
inline constexpr int kMaxCaseNotes = 256;
inline constexpr int kMaxCasePrelude = 64;  // prelude cases

inline constexpr std::string_view kCaseMagic = "kvcheck-case 1";

// The shortest text that reads back (strtod) to the same double, infinities
// and NaN included.
std::string exact_text(double value);

// The case as text (properties/repro/case_print.cpp); parse_case(print_case(c)) == c for every case
// whose scenario validates and whose strings are one_line().
std::string print_case(const CaseFile& c);

// What `kvcheck replay` and `kvcheck shrink` of this case must be given,
// each option with a leading space ("" when nothing): --backend and
// --reference where they load or start code (a case file never makes kvcheck
// run code), --model where the case ran on a checkpoint. The case file's
// header, the campaign's and shrink's printed commands and the HTML report
// all print it.
std::string case_command_options(const CaseFile& c);

// Text -> case, or "line N: <what was wrong>; expected <what>" for the first
// problem. The scenario is validated (Scenario::validate), and its errors are
// traced back to the line of the call or field they name.
Result<CaseFile> parse_case(std::string_view text);

// Reads and parses one file; errors start with the path.
Result<CaseFile> read_case_file(const std::string& path);

// The text with control characters turned into spaces and the ends trimmed,
// so that it fits on one line of a case file and reads back unchanged.
std::string one_line(std::string_view text);

// A verdict as a case records it.
RecordedVerdict record_verdict(const Verdict& verdict);

// "failed", "passed", "not_applicable".
std::string_view outcome_name(RecordedVerdict::Outcome outcome);
RecordedVerdict::Outcome outcome_of(const Verdict& verdict);

}  // namespace kvcheck
