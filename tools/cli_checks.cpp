// The validators of tools/cli_checks.h. Each returns CLI11's error text
// ("" when the value is fine); CLI11 prefixes the option's name.
#include "tools/cli_checks.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace kvcheck::cli {

namespace {

std::string in_quotes(const std::string& value) {
  return "\"" + (value.size() > 60 ? value.substr(0, 60) + "..." : value) + "\"";
}

std::string range_words(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max())
    return "a whole number of at least " + std::to_string(lo);
  return "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
}

}  // namespace

CLI::Validator whole_number(int64_t lo, int64_t hi) {
  const std::string words = range_words(lo, hi);
  return CLI::Validator(
      [lo, hi, words](std::string& value) -> std::string {
        int64_t n = 0;
        const char* end = value.data() + value.size();
        const auto [at, error] = std::from_chars(value.data(), end, n);
        if (value.empty() || error != std::errc() || at != end || n < lo || n > hi)
          return "expected " + words + ", got " + in_quotes(value);
        return "";
      },
      lo >= 0 && hi == std::numeric_limits<int64_t>::max() ? "INT>=" + std::to_string(lo) : "INT");
}

CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        uint64_t n = 0;
        const char* end = value.data() + value.size();
        const auto [at, error] = std::from_chars(value.data(), end, n);
        if (value.empty() || error != std::errc() || at != end)
          return "expected a whole number from 0 to 18446744073709551615, got " + in_quotes(value);
        return "";
      },
      "UINT64");
}

CLI::Validator report_file() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        namespace fs = std::filesystem;
        if (value == "-") return "";
        if (value.empty()) return "expected a file name, got \"\"";
        std::error_code ec;
        if (fs::is_directory(value, ec))
          return "cannot write " + in_quotes(value) + ": it is a folder";
        fs::path folder = fs::path(value).parent_path();
        if (folder.empty()) folder = ".";
        if (!fs::is_directory(folder, ec)) {
          const int why = fs::exists(folder, ec) ? ENOTDIR : ENOENT;
          return "cannot write " + in_quotes(value) + ": folder " + in_quotes(folder.string()) +
                 ": " + std::strerror(why);
        }
        if (::access(folder.c_str(), W_OK) != 0)
          return "cannot write " + in_quotes(value) + ": folder " + in_quotes(folder.string()) +
                 ": " + std::strerror(errno);
        return "";
      },
      "FILE");
}

std::string missing_subcommand_message(const std::vector<std::string>& remaining,
                                       const std::vector<std::string>& subcommands) {
  std::string list;
  for (const std::string& s : subcommands) list += (list.empty() ? "" : ", ") + s;
  if (remaining.empty()) return "a command is required: one of " + list;
  return "unknown command " + in_quotes(remaining.front()) + "; the commands are " + list +
         " (kvcheck COMMAND --help for each)";
}

}  // namespace kvcheck::cli
