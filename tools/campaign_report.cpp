// The campaign's console summary, from the one RunRecord the JSON, JUnit and
// HTML reports are written from too (`kvcheck merge` prints it for the
// merged run).
#include <cstdio>

#include "tools/campaign.h"
#include "tools/counted.h"
#include "tools/junit.h"
#include "tools/reason_ranges.h"
#include "tools/report_html.h"
#include "tools/report_json.h"

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

void print_summary(const RunRecord& r) {
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

void write_reports(const RunRecord& r, const std::string& json, const std::string& junit,
                   const std::string& html) {
  if (!json.empty()) write_text_file("--json", json, run_json(r));
  if (!junit.empty()) write_text_file("--junit", junit, junit_xml(r));
  if (!html.empty()) write_text_file("--html", html, html_report(r));
}

}  // namespace kvcheck::cli
