// group_reasons (tools/reason_ranges.h): a reason is split into its text and
// its runs of digits; reasons with the same text and the same count of
// numbers are one group, and each number's place shows the smallest and the
// largest value seen there (one value when they agree).
#include "tools/reason_ranges.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace kvcheck::cli {

namespace {

struct Split {
  std::string shape;             // the text with each number as '\x01'
  std::vector<uint64_t> values;  // [number] in order
};

Split split(const std::string& reason) {
  Split s;
  const auto digit = [&](size_t i) {
    return i < reason.size() && std::isdigit(static_cast<unsigned char>(reason[i]));
  };
  for (size_t i = 0; i < reason.size();) {
    if (!digit(i)) {
      s.shape += reason[i++];
      continue;
    }
    size_t end = i;
    while (digit(end)) ++end;
    if (end - i <= 18) {  // a count; longer runs stay text (a hash, a seed)
      s.values.push_back(std::stoull(reason.substr(i, end - i)));
      s.shape += '\x01';
    } else {
      s.shape += reason.substr(i, end - i);
    }
    i = end;
  }
  return s;
}

struct Group {
  std::vector<uint64_t> lo, hi;
  int cases = 0;
};

std::string join(const std::string& shape, const Group& g) {
  std::string out;
  size_t n = 0;
  for (const char c : shape) {
    if (c != '\x01') {
      out += c;
      continue;
    }
    out += std::to_string(g.lo[n]);
    if (g.hi[n] != g.lo[n]) out += "\u2013" + std::to_string(g.hi[n]);
    ++n;
  }
  return out;
}

}  // namespace

std::vector<ReasonGroup> group_reasons(const std::map<std::string, int>& why) {
  std::map<std::string, Group> groups;  // shape -> its numbers' ranges
  for (const auto& [reason, cases] : why) {
    const Split s = split(reason);
    auto [it, fresh] = groups.try_emplace(s.shape);
    Group& g = it->second;
    if (fresh) g.lo = g.hi = s.values;
    for (size_t i = 0; i < s.values.size(); ++i) {
      g.lo[i] = std::min(g.lo[i], s.values[i]);
      g.hi[i] = std::max(g.hi[i], s.values[i]);
    }
    g.cases += cases;
  }
  std::vector<ReasonGroup> out;
  for (const auto& [shape, g] : groups) out.push_back({join(shape, g), g.cases});
  std::stable_sort(out.begin(), out.end(),
                   [](const ReasonGroup& a, const ReasonGroup& b) { return a.cases > b.cases; });
  return out;
}

}  // namespace kvcheck::cli
