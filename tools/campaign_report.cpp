// The campaign's console summary and its JSON report, both from the one
// RunRecord the JUnit and HTML reports are written from too.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/traits_json.h"
#include "tools/build_info.h"
#include "tools/campaign.h"
#include "tools/counted.h"
#include "tools/reason_ranges.h"

namespace kvcheck::cli {

namespace {

std::string result_text(const Tally& t) {
  if (t.failed) return "FAILED: " + t.failure;
  if (not_run(t)) return "not run: " + not_run_reason(t);
  return "applied in " + std::to_string(t.cases ? 100 * applied(t) / t.cases : 0) +
         "% of its cases";
}

// Per backend, the share of all its cases that held each scenario class,
// three to a line.
void print_coverage(const RunRecord& r) {
  for (const BackendRecord& b : r.backends) {
    const auto [cases, classes] = backend_coverage(r.tallies, b.spec);
    if (cases == 0) continue;
    std::printf("\ncoverage on %s (share of its %s):\n", b.spec.c_str(),
                counted(cases, "case").c_str());
    int column = 0;
    for (const auto& [name, n] : classes) {
      std::printf("  %-28s %3d%%", name.c_str(), 100 * n / cases);
      if (++column % 3 == 0) std::printf("\n");
    }
    if (column % 3 != 0) std::printf("\n");
  }
}

// Per backend, each cache feature: the cases that could use it and those in
// which the engine said it did (properties/feature_use.h), then the warnings.
void print_feature_use(const RunRecord& r) {
  for (const BackendRecord& b : r.backends) {
    if (backend_coverage(r.tallies, b.spec).cases == 0) continue;
    std::printf(
        "\nproof of use on %s (cases: drawn = could use it, happened = the engine said "
        "it did):\n",
        b.spec.c_str());
    for (const FeatureUseRow& row : backend_feature_use(r.tallies, b)) {
      std::printf("  %-18s %-12s drawn %8d  happened %8d\n", row.name.c_str(),
                  row.declared ? "declared" : "not declared", row.count.drawn, row.count.used);
    }
  }
  for (const std::string& w : feature_warnings(r)) std::printf("warning: %s\n", w.c_str());
}

// Reasons that differ only in a number are one line (tools/reason_ranges.h).
void print_not_applicable(const std::vector<Tally>& tallies) {
  bool header = false;
  for (const Tally& t : tallies) {
    for (const ReasonGroup& g : group_reasons(t.not_applicable_why)) {
      if (!header) std::printf("\nnot applicable (never counted as passed):\n"), header = true;
      std::printf("  %-3s on %s: %s: %s\n", std::string(property_label(t.property)).c_str(),
                  t.backend.c_str(), counted(g.cases, "case").c_str(), g.text.c_str());
    }
  }
}

}  // namespace

void print_summary(const Campaign& c) {
  const RunRecord& r = c.record;
  std::printf("\n%-16s %-14s %8s %8s %8s %6s %11s  %s\n", "property", "backend", "cases", "applied",
              "passed", "n/a", "worst e/b", "result");
  for (const Tally& t : r.tallies) {
    char ratio[32] = "-";
    if (has_error_bound(t.property) && applied(t) > 0) {
      std::snprintf(ratio, sizeof(ratio), "%.3g", t.worst_ratio);
    }
    const std::string label =
        std::string(property_label(t.property)) + " " + std::string(property_name(t.property));
    std::printf("%-16s %-14s %8d %8d %8d %6d %11s  %s\n", label.c_str(), t.backend.c_str(), t.cases,
                applied(t), t.passed, t.not_applicable, ratio, result_text(t).c_str());
  }
  print_coverage(r);
  print_feature_use(r);
  print_not_applicable(r.tallies);
  for (const std::string& i : r.incomplete) std::printf("incomplete: %s\n", i.c_str());
  int cases = 0;
  for (const Tally& t : r.tallies) cases += t.cases;
  std::printf("\n%s in %.1f s: %s, %s\n",
              r.status == "passed"   ? "passed"
              : r.status == "failed" ? "FAILED"
                                     : r.status.c_str(),
              r.seconds, counted(cases, "property case").c_str(), r.outcome.c_str());
  std::fflush(stdout);
}

namespace {

nlohmann::json tally_json(const Tally& t, const RunRecord& r) {
  std::string case_file;
  for (const FailureRecord& f : r.failures) {
    if (f.property == t.property && f.backend == t.backend) case_file = f.case_path;
  }
  nlohmann::json features = nlohmann::json::object();
  for (const auto& [name, n] : t.features) {
    features[name] = {{"drawn", n.drawn}, {"happened", n.used}};
  }
  return {{"property", property_name(t.property)},
          {"backend", t.backend},
          {"cases", t.cases},
          {"applied", applied(t)},
          {"passed", t.passed},
          {"not_applicable", t.not_applicable},
          {"not_run", not_run(t) ? nlohmann::json(not_run_reason(t)) : nlohmann::json(nullptr)},
          {"worst_error_over_bound", t.worst_ratio},
          {"coverage", t.coverage},
          {"proof_of_use", features},
          {"not_applicable_why", t.not_applicable_why},
          {"seconds", t.seconds},
          {"failed", t.failed},
          {"failure", t.failure},
          {"case_file", case_file}};
}

nlohmann::json kill_json(const KillRecord& k) {
  nlohmann::json cells = nlohmann::json::array();
  for (const KillRecord::Cell& cell : k.cells) {
    cells.push_back({{"property", property_name(cell.property)},
                     {"killed", cell.killed},
                     {"cases", cell.cases},
                     {"shrunk_size", cell.shrunk_size}});
  }
  return {{"backend", k.backend},
          {"fault", k.is_fault ? k.fault : "none"},
          {"ran", k.ran},
          {"killed", k.killed},
          {"cases_to_kill", k.cases_to_kill},
          {"killed_by", k.killed_by},
          {"shrunk_size", k.shrunk_size},
          {"shrunk_scenario", k.shrunk_scenario},
          {"per_property", cells},
          {"problems", k.problems},
          {"notes", k.notes}};
}

}  // namespace

std::string campaign_json(const Campaign& c) {
  const RunRecord& r = c.record;
  nlohmann::json json;
  json["schema"] = 2;
  json["command"] = "campaign";
  json["kvcheck"] = {{"version", build_version()}, {"commit", build_commit()}};
  json["arguments"] = r.arguments;
  json["reproduce"] = r.reproduce;
  json["seed"] = c.seed;
  json["started"] = r.started;
  json["seconds"] = r.seconds;
  json["status"] = r.status;
  json["exit_code"] = r.exit_code;
  json["outcome"] = r.outcome;
  json["interrupted"] = r.status == "interrupted";
  json["incomplete"] = r.incomplete;
  json["notes"] = r.notes;
  json["faults"] = r.faults;
  if (c.model) json["model"] = {{"path", c.model->path}, {"hash", c.model->hash}};
  for (size_t b = 0; b < c.backends.size(); ++b) {
    double seconds = 0;
    for (const Tally& t : r.tallies) seconds += t.backend_index == b ? t.seconds : 0;
    json["backends"].push_back({{"backend", c.backends[b].spec},
                                {"traits", traits_to_json(c.backends[b].traits)},
                                {"isolated", c.isolated(b)},
                                {"seconds", seconds}});
  }
  json["coverage"] = nlohmann::json::object();
  for (const BackendRecord& b : r.backends) {
    const auto [cases, classes] = backend_coverage(r.tallies, b.spec);
    nlohmann::json shares = nlohmann::json::object();
    for (const auto& [name, n] : classes) shares[name] = cases ? double(n) / cases : 0.0;
    json["coverage"][b.spec] = {{"cases", cases}, {"share", shares}};
  }
  json["proof_of_use"] = nlohmann::json::object();
  for (const BackendRecord& b : r.backends) {
    nlohmann::json rows = nlohmann::json::array();
    for (const FeatureUseRow& row : backend_feature_use(r.tallies, b)) {
      rows.push_back({{"feature", row.name},
                      {"declared", row.declared},
                      {"drawn", row.count.drawn},
                      {"happened", row.count.used}});
    }
    json["proof_of_use"][b.spec] = rows;
  }
  json["warnings"] = feature_warnings(r);
  json["properties"] = nlohmann::json::array();
  for (const Tally& t : r.tallies) json["properties"].push_back(tally_json(t, r));
  json["kill_matrix_seed"] = r.kill_seed;
  json["kill_cases"] = r.kill_cases;
  json["kill_matrix"] = nlohmann::json::array();
  for (const KillRecord& k : r.kills) json["kill_matrix"].push_back(kill_json(k));
  return json.dump(2) + "\n";
}

}  // namespace kvcheck::cli
