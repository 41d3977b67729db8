// A count with its noun in the right number ("1 case", "2 cases"), for every
// line the CLI and its reports print: "1 cases" read as a bug in the tool.
#pragma once

#include <string>
#include <string_view>

namespace kvcheck::cli {

// `plural` defaults to the noun with an "s".
inline std::string counted(long long n, std::string_view noun, std::string_view plural = {}) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(noun);
  return plural.empty() ? out.append(noun).append("s") : out.append(plural);
}

}  // namespace kvcheck::cli
