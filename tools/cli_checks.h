// CLI11 validators for kvcheck's options, so that bad input at the command
// line is refused while parsing (exit 2, before any run starts) with a
// message that says in words what is allowed and quotes what was given:
// CLI11's own Range prints the bounds of a double to 300 digits, and its
// unsigned conversion takes "-1" as 2^64 - 1.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kvcheck::cli {

// A whole number in [lo, hi] ("expected a whole number of at least 1, got
// \"0\""); a sign or anything but digits is refused for an unsigned option.
CLI::Validator whole_number(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());

// A 64-bit seed: digits only, at most 2^64 - 1 ("-1" is refused, not wrapped).
CLI::Validator seed_number();

// A file a report is written to: its folder exists and may be written, so
// that a typo is found before the run rather than after it. "-" (standard
// output) passes. The message gives the system's reason.
CLI::Validator report_file();

// Why the command line names no subcommand: an unknown word (named, with the
// subcommands listed) or none at all; `remaining` is what CLI11 left unparsed.
std::string missing_subcommand_message(const std::vector<std::string>& remaining,
                                       const std::vector<std::string>& subcommands);

}  // namespace kvcheck::cli
