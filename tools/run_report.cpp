#include "tools/run_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "model/status.h"
#include "properties/repro/case_file.h"

namespace kvcheck::cli {

int ratio_bucket(double ratio) {
  if (!(ratio < 1)) return kRatioBuckets - 1;  // NaN counts as a failure too
  if (ratio < 1e-6) return 0;
  // [1e-6, 1e-5) -> 1, ..., [0.1, 1) -> 6
  const int b = 7 + int(std::floor(std::log10(ratio)));
  return std::clamp(b, 1, kRatioBuckets - 2);
}

std::string ratio_bucket_label(int bucket) {
  if (bucket <= 0) return "<1e-6";
  if (bucket >= kRatioBuckets - 1) return ">=1";
  static const char* const kLabels[] = {"", "1e-6", "1e-5", "1e-4", "1e-3", "0.01", "0.1"};
  return kLabels[bucket];
}

bool has_error_bound(Property p) {
  return p == Property::kOracle || p == Property::kCacheState;
}

std::string not_run_reason(const Tally& t) {
  if (!not_run(t)) return "";
  if (!t.never_applies.empty()) return t.never_applies;
  if (t.cases == 0) return "no case ran within the time budget";
  return t.cases == 1 ? "it did not apply to its 1 case"
                      : "it applied to none of the " + std::to_string(t.cases) + " cases";
}

BackendCoverage backend_coverage(const std::vector<Tally>& tallies, const std::string& backend) {
  BackendCoverage out;
  for (const Tally& t : tallies) {
    if (t.backend != backend) continue;
    out.cases += t.cases;
    for (const auto& [name, n] : t.coverage) out.classes[name] += n;
  }
  return out;
}

std::vector<FeatureUseRow> backend_feature_use(const std::vector<Tally>& tallies,
                                               const BackendRecord& backend) {
  std::vector<FeatureUseRow> rows;
  for (const FeatureRow& f : feature_rows()) {
    FeatureUseRow& row = rows.emplace_back();
    row.name = std::string(f.name);
    row.declared = (backend.observable & feature_bit(f.feature)) != 0;
    for (const Tally& t : tallies) {
      if (t.backend != backend.spec) continue;
      const auto it = t.features.find(row.name);
      if (it == t.features.end()) continue;
      row.count.drawn += it->second.drawn;
      row.count.used += it->second.used;
    }
  }
  return rows;
}

std::vector<std::string> feature_warnings(const std::vector<Tally>& tallies,
                                          const BackendRecord& b) {
  std::vector<std::string> lines;
  if (backend_coverage(tallies, b.spec).cases == 0) return lines;
  for (const FeatureUseRow& row : backend_feature_use(tallies, b)) {
    if (!row.declared || row.count.used > 0) continue;
    const std::string where =
        row.count.drawn == 0   ? "no case drawn could use it"
        : row.count.drawn == 1 ? "it did not happen in the 1 case that could use it"
                               : "it happened in none of the " + std::to_string(row.count.drawn) +
                                     " cases that could use it";
    lines.push_back(b.spec + " declares " + row.name + ", yet " + where +
                    (row.name == "prefix hit" ? " (lost sharing: a performance finding)" : ""));
  }
  return lines;
}

std::vector<std::string> feature_warnings(const RunRecord& run) {
  std::vector<std::string> lines;
  for (const BackendRecord& b : run.backends) {
    for (std::string& line : feature_warnings(run.tallies, b)) lines.push_back(std::move(line));
  }
  return lines;
}

std::string replay_command(const FailureRecord& f) {
  if (f.case_path.empty()) return "";
  const Result<CaseFile> c = parse_case(f.case_text);
  return "kvcheck replay" + (c ? case_command_options(c.value()) : std::string()) + " " +
         f.case_path;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &tm);
  return text;
}

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          out += "\xef\xbf\xbd";
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text_file(const std::string& option, const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (out) out << text;
  if (out) out.flush();
  if (!out)
    throw InputError(option + ": cannot write \"" + path + "\"" +
                     (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
}

}  // namespace kvcheck::cli
