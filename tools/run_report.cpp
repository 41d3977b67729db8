// The run record's shared arithmetic (histogram buckets, coverage and
// proof-of-use sums, tallies added up), the identity two shards of one
// campaign share, and the small file helpers every report writer uses.
#include "tools/run_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/atomic_file.h"
#include "model/rng.h"
#include "model/status.h"
#include "properties/repro/case_file.h"
#include "tools/shard.h"

namespace kvcheck::cli {

int ratio_bucket(double ratio) {
  if (!(ratio < 1)) return kRatioBuckets - 1;  // NaN counts as a failure too
  if (ratio < 1e-6) return 0;
  if (ratio < 0.1) {  // [1e-6, 1e-5) -> 1, ..., [0.01, 0.1) -> 5
    const int b = 7 + int(std::floor(std::log10(ratio)));
    return std::clamp(b, 1, kRatioFirstTenth - 1);
  }
  const int b = kRatioFirstTenth - 1 + int(ratio * 10);  // [0.1, 0.2) -> 6, ..., [0.9, 1) -> 14
  return std::clamp(b, kRatioFirstTenth, kRatioBuckets - 2);
}

std::string ratio_bucket_label(int bucket) {
  if (bucket <= 0) return "<1e-6";
  if (bucket >= kRatioBuckets - 1) return ">=1";
  static const char* const kDecades[] = {"", "1e-6", "1e-5", "1e-4", "1e-3", "0.01"};
  if (bucket < kRatioFirstTenth) return kDecades[bucket];
  return "0." + std::to_string(bucket - kRatioFirstTenth + 1);
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
  // A report is replaced whole, so a reader (kvcheck merge, a shard that
  // continues) sees the old one or the new one, never half of one; anything
  // but a regular file (/dev/stdout, a pipe) is written to as it is.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
    const std::string error = write_file_atomically(path, {bytes, text.size()});
    if (!error.empty()) throw InputError(option + ": cannot write \"" + path + "\": " + error);
    return;
  }
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (out) out << text;
  if (out) out.flush();
  if (!out)
    throw InputError(option + ": cannot write \"" + path + "\"" +
                     (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
}

}  // namespace kvcheck::cli

namespace kvcheck::cli {

void add_tally(Tally& into, const Tally& from) {
  into.cases += from.cases;
  into.passed += from.passed;
  into.not_applicable += from.not_applicable;
  into.worst_ratio = std::max(into.worst_ratio, from.worst_ratio);
  for (int b = 0; b < kRatioBuckets; ++b) into.ratio_histogram[b] += from.ratio_histogram[b];
  for (const auto& [name, n] : from.coverage) into.coverage[name] += n;
  for (const auto& [why, n] : from.not_applicable_why) into.not_applicable_why[why] += n;
  for (const auto& [name, n] : from.features) {
    into.features[name].drawn += n.drawn;
    into.features[name].used += n.used;
  }
  into.seconds += from.seconds;
  into.digest += from.digest;
  into.turns += from.turns;
  if (from.failed && (!into.failed || (from.first_failing_turn >= 0 &&
                                       (into.first_failing_turn < 0 ||
                                        from.first_failing_turn < into.first_failing_turn)))) {
    into.failed = true;
    into.failure = from.failure;
    into.first_failing_turn = from.first_failing_turn;
  }
}

std::string case_content_hash(const std::string& case_text) {
  uint64_t h = kFnv1a64Basis;
  std::istringstream lines(case_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#", 0) == 0 || line.rfind("note ", 0) == 0) continue;
    h = fnv1a64(line + "\n", h);
  }
  return digest_hex(h);
}

void decide_verdict(RunRecord& r, bool faults_on, const std::string& incomplete_outcome) {
  bool property_failed = false, kill_failed = false;
  for (const Tally& t : r.tallies) property_failed = property_failed || t.failed;
  for (const KillRecord& k : r.kills) kill_failed = kill_failed || !k.problems.empty();
  if (property_failed || kill_failed) {
    r.status = "failed";
    r.exit_code = 1;
    r.outcome = property_failed ? (faults_on ? "a property caught the fault"
                                             : "a property failed on the engine under test")
                                : "the kill matrix found a problem";
  } else if (!r.incomplete.empty()) {
    r.status = "incomplete";
    r.exit_code = kExitIncomplete;
    r.outcome = incomplete_outcome;
  } else {
    r.status = "passed";
    r.exit_code = 0;
    r.outcome = r.kills.empty() ? "every property held where it applied"
                                : "every property held where it applied and every fault was killed";
  }
  r.passed = r.status == "passed";
}

uint64_t run_digest(const RunRecord& run) {
  uint64_t digest = 0;
  for (const Tally& t : run.tallies) digest += t.digest;
  return digest;
}

namespace {

// Each flag's values in order ("--backend" may repeat), joined by spaces.
std::map<std::string, std::string> option_values(const RunRecord& r) {
  std::map<std::string, std::string> values;
  for (const auto& [flag, value] : r.options) {
    std::string& v = values[flag];
    v += (v.empty() ? "" : " ") + (value.empty() ? std::string("(set)") : value);
  }
  return values;
}

std::string difference_text(const std::string& what, const std::string& a,
                            const std::string& a_name, const std::string& b,
                            const std::string& b_name) {
  const auto shown = [](const std::string& v) { return v.empty() ? std::string("(none)") : v; };
  return what + ": " + shown(a) + " in " + a_name + ", " + shown(b) + " in " + b_name;
}

}  // namespace

std::string campaign_difference(const RunRecord& a, const std::string& a_name, const RunRecord& b,
                                const std::string& b_name) {
  const auto build = [](const RunRecord& r) { return r.version + " (commit " + r.commit + ")"; };
  if (build(a) != build(b))
    return difference_text("the kvcheck build", build(a), a_name, build(b), b_name);
  if (a.command != b.command)
    return difference_text("the command", a.command, a_name, b.command, b_name);
  if (a.seed != b.seed) {
    return difference_text("--seed", std::to_string(a.seed), a_name, std::to_string(b.seed),
                           b_name);
  }
  const std::map<std::string, std::string> va = option_values(a), vb = option_values(b);
  std::map<std::string, std::string> flags = va;
  flags.insert(vb.begin(), vb.end());
  for (const auto& [flag, unused] : flags) {
    const auto ia = va.find(flag), ib = vb.find(flag);
    const std::string x = ia == va.end() ? "" : ia->second, y = ib == vb.end() ? "" : ib->second;
    if (x != y) return difference_text(flag, x, a_name, y, b_name);
  }
  if (a.shard_count != b.shard_count) {
    return difference_text("the shard count", std::to_string(a.shard_count), a_name,
                           std::to_string(b.shard_count), b_name);
  }
  if (a.model_hash != b.model_hash) {
    return difference_text("the --model checkpoint's hash", a.model_hash, a_name, b.model_hash,
                           b_name);
  }
  return "";
}

}  // namespace kvcheck::cli
