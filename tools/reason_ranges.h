// Not-applicable reasons that differ only in their numbers, merged into one
// line with each varying number as a range: "the scenario's pool (pool_blocks
// 1–50) may run dry before the capacity is reached: 412 cases" in place of
// one line per pool size (about 30 a backend). The console, the HTML and the
// JUnit reports print these; the JSON keeps every reason as it came.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kvcheck::cli {

struct ReasonGroup {
  std::string text;  // the reason, each number that varies written lo–hi
  int cases = 0;     // the cases of every reason merged into it
};

// Groups `why` (reason -> cases) by the text around the numbers; the groups
// come most cases first, then by text.
std::vector<ReasonGroup> group_reasons(const std::map<std::string, int>& why);

}  // namespace kvcheck::cli
