// The JSON writer (tools/report_json.h): one object per run, every count
// from the RunRecord, so the JSON cannot disagree with the other reports.
// What a later reader needs to add shards up or to continue a killed one
// (digests, turns, the ratio histogram, the case files' text) is written
// too; what is derived (coverage shares, proof-of-use sums, warnings) is for
// people and scripts, and the reader recomputes it.
#include "tools/report_json.h"

#include <nlohmann/json.hpp>

#include "engine/traits_json.h"
#include "tools/shard.h"

namespace kvcheck::cli {

namespace {

nlohmann::json tally_json(const Tally& t, const RunRecord& r) {
  std::string case_file;
  for (const FailureRecord& f : r.failures) {
    if (f.property == t.property && f.backend == t.backend && case_file.empty()) {
      case_file = f.case_path;
    }
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
          {"never_applies", t.never_applies},
          {"worst_error_over_bound", t.worst_ratio},
          {"error_over_bound_histogram", t.ratio_histogram},  // run_report.h's buckets
          {"coverage", t.coverage},
          {"proof_of_use", features},
          {"not_applicable_why", t.not_applicable_why},
          {"seconds", t.seconds},
          {"failed", t.failed},
          {"failure", t.failure},
          {"first_failing_turn", t.first_failing_turn < 0 ? nlohmann::json(nullptr)
                                                          : nlohmann::json(t.first_failing_turn)},
          {"turns", t.turns},
          {"case_digest", digest_hex(t.digest)},
          {"case_file", case_file}};
}

nlohmann::json failure_json(const FailureRecord& f) {
  const Location& w = f.verdict.where;
  return {{"property", property_name(f.property)},
          {"backend", f.backend},
          {"faults", f.faults},
          {"turn", f.turn < 0 ? nlohmann::json(nullptr) : nlohmann::json(f.turn)},
          {"summary", f.verdict.summary},
          {"detail", f.verdict.detail},
          {"where",
           {{"call", w.call},
            {"sequence", w.sequence},
            {"position", w.position},
            {"layer", w.layer},
            {"kv_head", w.kv_head},
            {"first_bad_position", w.first_bad_position},
            {"last_bad_position", w.last_bad_position}}},
          {"case_file", f.case_path},
          {"case_hash", f.case_text.empty() ? "" : case_content_hash(f.case_text)},
          {"case_text", f.case_text}};
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

void put_backends(nlohmann::json& json, const RunRecord& r) {
  json["backends"] = nlohmann::json::array();
  for (size_t b = 0; b < r.backends.size(); ++b) {
    double seconds = 0;
    for (const Tally& t : r.tallies) seconds += t.backend_index == b ? t.seconds : 0;
    json["backends"].push_back({{"backend", r.backends[b].spec},
                                {"traits", traits_to_json(r.backends[b].declared)},
                                {"isolated", r.backends[b].isolated},
                                {"seconds", seconds}});
  }
  json["coverage"] = nlohmann::json::object();
  json["proof_of_use"] = nlohmann::json::object();
  for (const BackendRecord& b : r.backends) {
    const auto [cases, classes] = backend_coverage(r.tallies, b.spec);
    nlohmann::json shares = nlohmann::json::object();
    for (const auto& [name, n] : classes) shares[name] = cases ? double(n) / cases : 0.0;
    json["coverage"][b.spec] = {{"cases", cases}, {"share", shares}};
    nlohmann::json rows = nlohmann::json::array();
    for (const FeatureUseRow& row : backend_feature_use(r.tallies, b)) {
      rows.push_back({{"feature", row.name},
                      {"declared", row.declared},
                      {"drawn", row.count.drawn},
                      {"happened", row.count.used}});
    }
    json["proof_of_use"][b.spec] = rows;
  }
}

void put_shards(nlohmann::json& json, const RunRecord& r) {
  if (r.command != "merge") {
    json["shard"] = {{"index", r.shard_index},
                     {"count", r.shard_count},
                     {"source", r.shard_source.empty() ? nlohmann::json(nullptr)
                                                       : nlohmann::json(r.shard_source)}};
    return;
  }
  json["shard_count"] = r.shard_count;
  json["shards"] = nlohmann::json::array();
  for (const ShardRecord& s : r.shards) {
    json["shards"].push_back({{"index", s.index},
                              {"report", s.report},
                              {"status", s.status},
                              {"cases", s.cases},
                              {"seconds", s.seconds},
                              {"case_digest", digest_hex(s.digest)}});
  }
}

}  // namespace

std::string run_json(const RunRecord& r) {
  nlohmann::json json;
  json["schema"] = kReportSchema;
  json["command"] = r.command;
  json["kvcheck"] = {{"version", r.version}, {"commit", r.commit}};
  json["arguments"] = r.arguments;
  json["options"] = nlohmann::json::array();
  for (const auto& [flag, value] : r.options) json["options"].push_back({flag, value});
  json["reproduce"] = r.reproduce;
  json["seed"] = r.seed;
  put_shards(json, r);
  json["started"] = r.started;
  json["seconds"] = r.seconds;
  json["status"] = r.status;
  json["exit_code"] = r.status == "running" ? nlohmann::json(nullptr) : nlohmann::json(r.exit_code);
  json["outcome"] = r.outcome;
  json["interrupted"] = r.status == "interrupted";
  json["incomplete"] = r.incomplete;
  json["notes"] = r.notes;
  json["faults"] = r.faults;
  if (!r.model_path.empty()) json["model"] = {{"path", r.model_path}, {"hash", r.model_hash}};
  put_backends(json, r);
  json["warnings"] = feature_warnings(r);
  json["case_digest"] = digest_hex(run_digest(r));
  json["properties"] = nlohmann::json::array();
  for (const Tally& t : r.tallies) json["properties"].push_back(tally_json(t, r));
  json["failures"] = nlohmann::json::array();
  for (const FailureRecord& f : r.failures) json["failures"].push_back(failure_json(f));
  json["kill_matrix_seed"] = r.kill_seed;
  json["kill_cases"] = r.kill_cases;
  json["kill_matrix_done"] = r.kill_matrix_done;
  json["kill_matrix"] = nlohmann::json::array();
  for (const KillRecord& k : r.kills) json["kill_matrix"].push_back(kill_json(k));
  return json.dump(2) + "\n";
}

}  // namespace kvcheck::cli
