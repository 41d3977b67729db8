// The HTML report's sections, each from the RunRecord (tools/report_html.h).
#include "tools/report_html.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "tools/counted.h"
#include "tools/reason_ranges.h"
#include "tools/report_svg.h"
#include "tools/shard.h"
#include "tools/timeline_svg.h"

namespace kvcheck::cli {

namespace {

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#212121;max-width:1220px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:22px 0 6px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:14px 0 4px}
.FAILED{color:#c62828}.passed{color:#2e7d32}.INCOMPLETE,.INTERRUPTED{color:#e65100}
table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #e0e0e0;
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right}
pre,code{font:12px/1.35 ui-monospace,monospace;overflow-wrap:anywhere}pre{background:#f7f7f7;padding:6px 8px;
margin:4px 0;white-space:pre-wrap;border-left:3px solid #bbb}
.fail pre{border-left-color:#c62828}.why{color:#6d4c41;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#212121}svg text.axis{font-size:9px;fill:#666}
svg text.cell{font-size:11px}.backends{display:flex;flex-wrap:wrap;gap:8px 24px}
.note{color:#555;font-size:12px}td.k{white-space:nowrap}.pair{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.b{min-width:8em;max-width:16em;overflow-wrap:anywhere}.backends>div{max-width:46em;overflow-wrap:anywhere}.pair>div{min-width:0}
details.why summary{cursor:pointer}
@media (max-width:1000px){td,th{padding:3px 4px}.h{display:none}.b{min-width:5em}}.frames{display:flex;flex-wrap:wrap;gap:10px 22px}.index li{margin:2px 0}a{color:#1565c0}
)";

std::string fixed(const char* format, double v) {
  char text[48];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

// A backend string in a table cell: a long one (an exec: command) is shown
// by its start and end, whole in the cell's tooltip and under "Backends".
std::string backend_cell(const std::string& spec) {
  constexpr size_t kShown = 44;
  if (spec.size() <= kShown) return escape_xml(spec);
  return "<span title=\"" + escape_xml(spec) + "\">" + escape_xml(spec.substr(0, 20)) + "\u2026" +
         escape_xml(spec.substr(spec.size() - 23)) + "</span>";
}

std::string property_title(Property p) {
  return std::string(property_label(p)) + " " + std::string(property_name(p));
}

void run_section(std::ostringstream& out, const RunRecord& run) {
  out << "<table>";
  if (run.has_seed) out << "<tr><th>seed</th><td><code>" << run.seed << "</code></td></tr>";
  out << "<tr><th>started (UTC)</th><td>" << escape_xml(run.started) << "</td></tr>"
      << "<tr><th>time</th><td>" << fixed("%.1f s", run.seconds) << "</td></tr>"
      << "<tr><th>engine faults</th><td>" << escape_xml(run.faults) << "</td></tr>"
      << "<tr><th>reproduce</th><td><code>" << escape_xml(run.reproduce) << "</code></td></tr>"
      << "</table>\n<h3>Backends and their traits</h3><div class=\"backends\">";
  for (const BackendRecord& b : run.backends) {
    out << "<div><b>" << escape_xml(b.spec) << "</b><pre>" << escape_xml(b.traits)
        << "</pre></div>";
  }
  out << "</div>\n";
}

// `kvcheck merge`: each shard's report, and whether it finished.
void shards_section(std::ostringstream& out, const RunRecord& run) {
  if (run.shards.empty()) return;
  out << "<h3>Shards</h3><table><tr><th>shard</th><th>status</th><th>cases</th><th>time</th>"
      << "<th>case digest</th><th>report</th></tr>\n";
  for (const ShardRecord& s : run.shards) {
    const char* style = s.status == "passed"   ? "passed"
                        : s.status == "failed" ? "FAILED"
                                               : "INCOMPLETE";
    out << "<tr><td class=\"n\">" << s.index << "</td><td><span class=\"" << style << "\">"
        << escape_xml(s.status) << "</span></td><td class=\"n\">" << s.cases
        << "</td><td class=\"n\">" << fixed("%.1f s", s.seconds) << "</td><td><code>"
        << (s.report.empty() ? "-" : digest_hex(s.digest)) << "</code></td><td><code>"
        << escape_xml(s.report.empty() ? "(no report)" : s.report) << "</code></td></tr>\n";
  }
  out << "</table>\n";
}

// The count, and why: reasons that differ in a number merged into ranges,
// the first two shown and the rest folded (a P9 list of one line per pool
// size filled most of the first screen).
std::string not_applicable_cell(const Tally& t) {
  std::string text = std::to_string(t.not_applicable);
  const std::vector<ReasonGroup> groups = group_reasons(t.not_applicable_why);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i == 2)
      text += "<details class=\"why\"><summary>" + counted(groups.size() - 2, "more reason") +
              "</summary>";
    text += "<div class=\"why\">" + std::to_string(groups[i].cases) + ": " +
            escape_xml(groups[i].text) + "</div>";
  }
  if (groups.size() > 2) text += "</details>";
  return text;
}

void properties_section(std::ostringstream& out, const RunRecord& run) {
  out << "<h2>Properties</h2><table><tr><th>property</th><th>backend</th><th>cases</th>"
      << "<th>passed</th><th>not applicable, why</th><th>worst error/bound</th>"
      << "<th class=\"h\">error/bound per case</th><th>result</th></tr>\n";
  for (const Tally& t : run.tallies) {
    const bool measured = has_error_bound(t.property);
    out << "<tr><td class=\"k\">" << escape_xml(property_title(t.property))
        << "</td><td class=\"b\">" << backend_cell(t.backend) << "</td><td class=\"n\">" << t.cases
        << "</td><td class=\"n\">" << t.passed << "</td><td>" << not_applicable_cell(t)
        << "</td><td class=\"n\">" << (measured ? fixed("%.3g", t.worst_ratio) : "-")
        << "</td><td class=\"h\">"
        << (measured ? ratio_histogram_svg(t.ratio_histogram) : "bitwise") << "</td><td>";
    if (t.failed) {
      out << "<span class=\"FAILED\">FAILED: " << escape_xml(t.failure) << "</span>";
    } else if (not_run(t)) {
      out << "not run: " << escape_xml(not_run_reason(t));
    } else {
      out << "<span class=\"passed\">held</span> in " << applied(t) << " applied cases";
    }
    out << "</td></tr>\n";
  }
  out << "</table><p class=\"note\">error/bound histogram: decades from &lt;1e-6 to [0.1, 1) "
      << "in blue; red: cases at or over the bound, or failed otherwise. Only P1 and P6 "
      << "measure an error against a bound; the other properties compare bits (or 2B).</p>\n";
}

void coverage_section(std::ostringstream& out, const RunRecord& run) {
  out << "<h2>Coverage of scenario shapes</h2><div class=\"backends\">";
  for (const BackendRecord& b : run.backends) {
    const auto [cases, classes] = backend_coverage(run.tallies, b.spec);
    std::vector<std::pair<std::string, double>> rows;
    for (const auto& [name, n] : classes) rows.push_back({name, cases ? double(n) / cases : 0});
    out << "<div><b>" << escape_xml(b.spec) << "</b>, " << counted(cases, "case") << "<br>"
        << percent_bars_svg(rows) << "</div>";
  }
  out << "</div><p class=\"note\">share of the generated cases (all properties) that hold "
      << "each shape; a class at 0% was never drawn.</p>\n";
}

void feature_use_section(std::ostringstream& out, const RunRecord& run) {
  out << "<h2>Proof of use</h2><table><tr><th>backend</th><th>feature</th><th>declared</th>"
      << "<th>drawn (cases)</th><th>happened (cases)</th></tr>";
  for (const BackendRecord& b : run.backends) {
    for (const FeatureUseRow& row : backend_feature_use(run.tallies, b)) {
      const bool never = row.declared && row.count.used == 0;
      out << "<tr><td class=\"b\">" << backend_cell(b.spec) << "</td><td>" << escape_xml(row.name)
          << "</td><td>" << (row.declared ? "yes" : "no") << "</td><td class=\"n\">"
          << row.count.drawn << "</td><td class=\"n\">"
          << (never ? "<span class=\"failed\">0</span>" : std::to_string(row.count.used))
          << "</td></tr>\n";
    }
  }
  out << "</table><p class=\"note\">drawn: cases whose scenario could use the feature; "
      << "happened: cases in which the engine's own introspection (reused(), pool(), length()) "
      << "said it did (docs/REPORTS.md, \"Proof of use\").</p>\n";
}

HeatCell kill_cell(const KillRecord& k, int max_cases) {
  HeatCell c;
  if (!k.ran) return {"not run", "not reached within the time budget", "#e0e0e0"};
  if (!k.is_fault) {
    return k.killed ? HeatCell{"FAILED by " + k.killed_by, k.shrunk_scenario, "#e57373"}
                    : HeatCell{"held " + counted(k.cases_to_kill, "case"),
                               "the correct engine must survive", "#c8e6c9"};
  }
  if (!k.killed) {
    return {"survived " + std::to_string(k.cases_to_kill), "no property caught it", "#b71c1c"};
  }
  c.text = counted(k.cases_to_kill, "case") + ", size " + std::to_string(k.shrunk_size) + ", by " +
           k.killed_by;
  c.tooltip = "killed after " + std::to_string(k.cases_to_kill) + " cases by " + k.killed_by +
              "; shrunk scenario (size " + std::to_string(k.shrunk_size) + "):\n" +
              k.shrunk_scenario;
  for (const std::string& p : k.problems) c.tooltip += "\nproblem: " + p;
  c.colour = k.ok() ? kill_colour(k.cases_to_kill, max_cases) : "#e57373";
  return c;
}

// One property's own cell: "cases/size" where it killed, "-" where it did
// not (the catalogue says which properties are meant to).
HeatCell property_cell(const KillRecord& k, const KillRecord::Cell& c, int max_cases) {
  const std::string who = k.fault + " x " + property_title(c.property);
  if (!c.killed) {
    return {"-", who + ": not killed in " + counted(c.cases, "case"), "#fafafa"};
  }
  if (!k.is_fault) return {"FAIL", who + ": the correct engine failed", "#e57373"};
  return {std::to_string(c.cases) + "/" + std::to_string(c.shrunk_size),
          who + ": killed after " + std::to_string(c.cases) + " cases, shrunk to size " +
              std::to_string(c.shrunk_size),
          kill_colour(c.cases, max_cases)};
}

void kill_matrix_section(std::ostringstream& out, const RunRecord& run) {
  if (run.kills.empty()) return;
  const bool per_property = !run.kills.front().cells.empty();
  out << "<h2>Kill matrix</h2><p class=\"note\">every fault of docs/FAULTS.md injected into "
      << "the engine; "
      << (per_property ? "one column per property (cases until it killed the fault / size of "
                         "its shrunk scenario, '-' where it did not) and "
                       : "")
      << "the column 'any' (every property per case). Colour: cases until a property killed "
      << "the fault, green = 1 case, red = " << run.kill_cases
      << " cases (log scale); 'any' text: cases, size of the shrunk scenario, the property "
      << "that killed it. Hover a cell for details.</p><div class=\"backends\">";
  for (const BackendRecord& b : run.backends) {
    std::vector<std::string> rows, columns;
    std::vector<std::vector<HeatCell>> cells;
    for (const KillRecord& k : run.kills) {
      if (k.backend != b.spec) continue;
      rows.push_back(k.fault);
      std::vector<HeatCell>& row = cells.emplace_back();
      for (const KillRecord::Cell& c : k.cells) row.push_back(property_cell(k, c, run.kill_cases));
      row.push_back(kill_cell(k, run.kill_cases));
    }
    if (rows.empty()) continue;
    if (per_property) {
      for (const KillRecord::Cell& c : run.kills.front().cells) {
        columns.emplace_back(property_label(c.property));
      }
      // Per-property cells are narrow; 'any' keeps its room for the text.
      std::vector<std::vector<HeatCell>> props(cells.size()), any(cells.size());
      for (size_t r = 0; r < cells.size(); ++r) {
        props[r].assign(cells[r].begin(), cells[r].end() - 1);
        any[r].push_back(cells[r].back());
      }
      out << "<div><b>" << escape_xml(b.spec) << "</b><br>"
          << heat_map_svg(rows, columns, props, 52) << "<br>"
          << heat_map_svg(rows, {"any property"}, any) << "</div>";
      continue;
    }
    out << "<div><b>" << escape_xml(b.spec) << "</b><br>"
        << heat_map_svg(rows, {"any property"}, cells) << "</div>";
  }
  out << "</div>\n";
}

std::string location_text(const Location& w) {
  std::vector<std::string> parts;
  const auto put = [&](const std::string& name, int v) {
    if (v >= 0) parts.push_back(name + std::to_string(v));
  };
  put("call ", w.call);
  put("sequence s", w.sequence);
  put("position ", w.position);
  put("layer ", w.layer);
  put("kv head ", w.kv_head);
  if (w.first_bad_position >= 0) {
    parts.push_back("wrong positions " + std::to_string(w.first_bad_position) + ".." +
                    std::to_string(w.last_bad_position));
  }
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : ", ") + p;
  return text.empty() ? "(none recorded)" : text;
}

void error_map_section(std::ostringstream& out, const ErrorMap& map) {
  out << "<p><b>" << escape_xml(map.title) << "</b>";
  if (map.ratio.size() > size_t(kErrorMapMaxRows)) {
    out << " (the first " << kErrorMapMaxRows << " of " << map.ratio.size() << " rows)";
  }
  out << "<br><span class=\"note\">white: error/bound below 1e-6, darker blue up to the "
      << "bound, red: at or over it (or not finite). Hover a cell for its value.</span><br>"
      << error_map_svg(map) << "</p>";
}

void timeline_section(std::ostringstream& out, const CacheTimeline& timeline) {
  out << "<p><b>Cache timeline</b>: the storage after every call, one row per storage unit, "
         "one square per slot. ";
  if (!timeline.unavailable.empty()) {
    out << "<span class=\"note\">Not drawn: " << escape_xml(timeline.unavailable) << ".</span></p>";
    return;
  }
  if (timeline.truncated) {
    out << "<span class=\"note\">Only the first " << timeline.frames.size()
        << " frames are drawn.</span>";
  }
  out << "<br>" << timeline_legend_svg() << "</p><div class=\"frames\">";
  for (const TimelineFrame& frame : timeline.frames) out << timeline_frame_svg(frame);
  out << "</div>";
}

void failure_section(std::ostringstream& out, const FailureRecord& f, int index) {
  out << "<div class=\"fail\"><h3 id=\"failure-" << index << "\" class=\"FAILED\">"
      << escape_xml(property_title(f.property)) << " on " << escape_xml(f.backend)
      << (f.faults.empty() || f.faults == "none" ? "" : " (faults: " + escape_xml(f.faults) + ")")
      << "</h3><p><b>" << escape_xml(f.verdict.summary) << "</b></p><table><tr><th>where</th><td>"
      << escape_xml(location_text(f.verdict.where)) << "</td></tr><tr><th>case file</th><td><code>"
      << escape_xml(f.case_path.empty() ? "(not written)" : f.case_path) << "</code></td></tr>";
  if (!f.case_path.empty()) {
    out << "<tr><th>replay</th><td><code>" << escape_xml(replay_command(f)) << "</code></td></tr>";
  }
  out << "</table>";
  for (const ErrorMap& map : f.error_maps) error_map_section(out, map);
  timeline_section(out, f.timeline);
  out << "<div class=\"pair\"><div><b>localisation</b><pre>" << escape_xml(f.verdict.detail)
      << "</pre></div><div><b>case file</b><pre class=\"case\">" << escape_xml(f.case_text)
      << "</pre></div></div></div>\n";
}

void failures_section(std::ostringstream& out, const RunRecord& run) {
  size_t kill_problems = 0;
  for (const KillRecord& k : run.kills) kill_problems += k.problems.size();
  out << "<h2 id=\"failures\">Property failures (" << run.failures.size() << ")</h2>";
  if (run.failures.empty())
    out << "<p>none"
        << (kill_problems ? "; the kill matrix's problems, listed at the top, "
                            "decided the verdict"
                          : "")
        << "</p>";
  out << "<ol class=\"index\">";
  for (size_t i = 0; i < run.failures.size(); ++i) {
    const FailureRecord& f = run.failures[i];
    out << "<li><a href=\"#failure-" << i << "\">" << escape_xml(property_title(f.property))
        << " on " << escape_xml(f.backend) << "</a>: " << escape_xml(f.verdict.summary) << "</li>";
  }
  out << "</ol>\n";
  for (size_t i = 0; i < run.failures.size(); ++i) failure_section(out, run.failures[i], int(i));
}

void replayed_section(std::ostringstream& out, const RunRecord& run) {
  out << "<h2>Replayed verdicts</h2><table><tr><th>case file</th><th>property</th>"
      << "<th>backend</th><th>faults</th><th>verdict</th></tr>\n";
  for (const FailureRecord& f : run.replayed) {
    const char* status = !f.verdict.passed      ? "FAILED"
                         : f.verdict.applicable ? "passed"
                                                : "not applicable";
    out << "<tr><td><code>" << escape_xml(f.case_path) << "</code></td><td>"
        << escape_xml(property_title(f.property)) << "</td><td class=\"b\">"
        << backend_cell(f.backend) << "</td><td>" << escape_xml(f.faults)
        << "</td><td><span class=\"" << status << "\">" << status
        << "</span>: " << escape_xml(f.verdict.summary) << "</td></tr>\n";
  }
  out << "</table>\n";
}

}  // namespace

std::string html_report(const RunRecord& run) {
  const char* verdict = run.status == "interrupted"  ? "INTERRUPTED"
                        : run.status == "incomplete" ? "INCOMPLETE"
                        : run.passed                 ? "passed"
                                                     : "FAILED";
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kvcheck "
      << escape_xml(run.command) << ": " << verdict << "</title><style>" << kStyle
      << "</style></head><body>\n<h1>kvcheck " << escape_xml(run.command) << ": <span class=\""
      << verdict << "\">" << verdict << "</span></h1><p>" << escape_xml(run.outcome);
  if (!run.failures.empty()) {
    out << " &mdash; <a href=\"#failures\">" << run.failures.size() << " failure"
        << (run.failures.size() == 1 ? "" : "s") << " below</a>";
  }
  out << "</p>\n";
  // What decided the verdict, as text: a heat-map cell's tooltip is not enough.
  std::vector<std::string> reasons = run.incomplete;
  for (const KillRecord& k : run.kills) {
    for (const std::string& p : k.problems)
      reasons.push_back("kill matrix on " + k.backend + ": " + p);
  }
  for (const std::string& w : feature_warnings(run)) reasons.push_back("warning: " + w);
  if (!reasons.empty()) {
    out << "<p><b>Problems and warnings:</b></p><ul class=\"reasons\">";
    for (const std::string& r : reasons) out << "<li>" << escape_xml(r) << "</li>";
    out << "</ul>\n";
  }
  run_section(out, run);
  shards_section(out, run);
  if (!run.tallies.empty()) {
    properties_section(out, run);
    coverage_section(out, run);
    feature_use_section(out, run);
  }
  kill_matrix_section(out, run);
  if (!run.replayed.empty()) replayed_section(out, run);
  failures_section(out, run);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace kvcheck::cli
