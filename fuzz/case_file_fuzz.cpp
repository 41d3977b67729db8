// case_file_fuzz: the case-file parser never crashes, and every file it
// accepts round-trips: print(parse(text)) parses back to the same case, and
// printing that again gives the same text (the printed form is a fixed point).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_target.h"
#include "properties/repro/case_file.h"

namespace kvcheck::fuzz {

const TargetTraits kTarget{"case_file_fuzz", /*keep_rejected_in_corpus=*/true};

namespace {

[[noreturn]] void fail(const std::string& message, std::string_view text) {
  std::fprintf(stderr, "case_file_fuzz: %s\n--- input ---\n%.*s\n--- end ---\n", message.c_str(),
               int(text.size()), text.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void initialize() {}

Outcome run_one(std::span<const uint8_t> input) {
  const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  const Result<CaseFile> parsed = parse_case(text);
  if (!parsed.ok()) {
    if (parsed.error().empty()) fail("a rejected file must say why", text);
    return Outcome::kRejected;
  }
  const CaseFile& c = parsed.value();
  if (const std::string error = c.scenario.validate(); !error.empty()) {
    fail("accepted a scenario that does not validate: " + error, text);
  }
  const std::string printed = print_case(c);
  const Result<CaseFile> reparsed = parse_case(printed);
  if (!reparsed.ok()) fail("its own printed form does not parse: " + reparsed.error(), printed);
  if (!(reparsed.value() == c)) fail("print+parse changed the case; printed form follows", printed);
  if (print_case(reparsed.value()) != printed) fail("printing is not a fixed point", printed);
  return Outcome::kAccepted;
}

}  // namespace kvcheck::fuzz
