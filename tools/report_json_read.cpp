// The JSON reader (tools/report_json.h): a campaign's report back into a
// RunRecord, for `kvcheck merge` and for a shard that continues. A report
// from another tool, another schema or with a key missing is refused with
// the file and the key named; nothing in it is run.
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/traits_json.h"
#include "model/status.h"
#include "properties/feature_use.h"
#include "tools/backends.h"
#include "tools/report_json.h"
#include "tools/shard.h"

namespace kvcheck::cli {

namespace {

using nlohmann::json;

// Where a value sits, for messages: "shard-1.json: properties[3].cases".
struct At {
  const std::string& source;
  std::string path;
  At operator[](const std::string& key) const { return {source, path + "." + key}; }
  At operator[](size_t i) const { return {source, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(source + ": " + (path.empty() ? "" : path.substr(1) + ": ") + what);
  }
};

const json& member(const json& j, const std::string& key, const At& at) {
  if (!j.is_object()) at.fail("expected an object");
  const auto it = j.find(key);
  if (it == j.end()) at[key].fail("missing");
  return *it;
}

template <class T>
T field(const json& j, const std::string& key, const At& at) {
  const json& v = member(j, key, at);
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    at[key].fail("unexpected value " + v.dump().substr(0, 80));
  }
}

Property property_at(const json& j, const std::string& key, const At& at) {
  const auto p = parse_property(field<std::string>(j, key, at));
  if (!p) at[key].fail("unknown property \"" + field<std::string>(j, key, at) + "\"");
  return *p;
}

// A ratio, where JSON's null stands for what it cannot hold (inf, NaN).
double ratio_at(const json& j, const std::string& key, const At& at) {
  if (member(j, key, at).is_null()) return std::numeric_limits<double>::infinity();
  return field<double>(j, key, at);
}

uint64_t digest_at(const json& j, const std::string& key, const At& at) {
  const auto d = parse_digest_hex(field<std::string>(j, key, at));
  if (!d) at[key].fail("expected 16 hex digits");
  return *d;
}

Tally tally_from(const json& j, const At& at, const RunRecord& r) {
  Tally t;
  t.property = property_at(j, "property", at);
  t.backend = field<std::string>(j, "backend", at);
  t.backend_index = r.backends.size();
  for (size_t b = 0; b < r.backends.size(); ++b) {
    if (r.backends[b].spec == t.backend) t.backend_index = b;
  }
  if (t.backend_index == r.backends.size()) at["backend"].fail("not among the backends");
  t.cases = field<int>(j, "cases", at);
  t.passed = field<int>(j, "passed", at);
  t.not_applicable = field<int>(j, "not_applicable", at);
  t.never_applies = field<std::string>(j, "never_applies", at);
  t.worst_ratio = ratio_at(j, "worst_error_over_bound", at);
  t.ratio_histogram = field<std::array<int, kRatioBuckets>>(j, "error_over_bound_histogram", at);
  t.coverage = field<std::map<std::string, int>>(j, "coverage", at);
  t.not_applicable_why = field<std::map<std::string, int>>(j, "not_applicable_why", at);
  const json& features = member(j, "proof_of_use", at);
  for (const auto& [name, n] : features.items()) {
    t.features[name] = {field<int>(n, "drawn", at["proof_of_use"][name]),
                        field<int>(n, "happened", at["proof_of_use"][name])};
  }
  t.seconds = field<double>(j, "seconds", at);
  t.failed = field<bool>(j, "failed", at);
  t.failure = field<std::string>(j, "failure", at);
  const json& turn = member(j, "first_failing_turn", at);
  t.first_failing_turn = turn.is_null() ? -1 : field<int>(j, "first_failing_turn", at);
  t.turns = field<int>(j, "turns", at);
  t.digest = digest_at(j, "case_digest", at);
  return t;
}

FailureRecord failure_from(const json& j, const At& at) {
  FailureRecord f;
  f.property = property_at(j, "property", at);
  f.backend = field<std::string>(j, "backend", at);
  f.faults = field<std::string>(j, "faults", at);
  f.turn = member(j, "turn", at).is_null() ? -1 : field<int>(j, "turn", at);
  f.verdict.property = f.property;
  f.verdict.passed = false;
  f.verdict.summary = field<std::string>(j, "summary", at);
  f.verdict.detail = field<std::string>(j, "detail", at);
  const json& w = member(j, "where", at);
  Location& l = f.verdict.where;
  for (auto [key, slot] : {std::pair{"call", &l.call},
                           {"sequence", &l.sequence},
                           {"position", &l.position},
                           {"layer", &l.layer},
                           {"kv_head", &l.kv_head},
                           {"first_bad_position", &l.first_bad_position},
                           {"last_bad_position", &l.last_bad_position}}) {
    *slot = field<int>(w, key, at["where"]);
  }
  f.case_path = field<std::string>(j, "case_file", at);
  f.case_text = field<std::string>(j, "case_text", at);
  f.timeline.unavailable =
      "a merged or continued report carries no timeline (the shard's own "
      "--html has it; `kvcheck replay --html` on the case file draws it)";
  return f;
}

KillRecord kill_from(const json& j, const At& at) {
  KillRecord k;
  k.backend = field<std::string>(j, "backend", at);
  k.fault = field<std::string>(j, "fault", at);
  k.is_fault = k.fault != "none";
  if (!k.is_fault) k.fault = "(correct engine)";
  k.ran = field<bool>(j, "ran", at);
  k.killed = field<bool>(j, "killed", at);
  k.cases_to_kill = field<int>(j, "cases_to_kill", at);
  k.killed_by = field<std::string>(j, "killed_by", at);
  k.shrunk_size = field<int>(j, "shrunk_size", at);
  k.shrunk_scenario = field<std::string>(j, "shrunk_scenario", at);
  const json& cells = member(j, "per_property", at);
  for (size_t i = 0; i < cells.size(); ++i) {
    const At c = at["per_property"][i];
    k.cells.push_back({property_at(cells[i], "property", c), field<bool>(cells[i], "killed", c),
                       field<int>(cells[i], "cases", c), field<int>(cells[i], "shrunk_size", c)});
  }
  k.problems = field<std::vector<std::string>>(j, "problems", at);
  k.notes = field<std::vector<std::string>>(j, "notes", at);
  return k;
}

void header_from(const json& j, const At& at, RunRecord& r) {
  r.command = field<std::string>(j, "command", at);
  const json& build = member(j, "kvcheck", at);
  r.version = field<std::string>(build, "version", at["kvcheck"]);
  r.commit = field<std::string>(build, "commit", at["kvcheck"]);
  r.arguments = field<std::vector<std::string>>(j, "arguments", at);
  for (const auto& pair : field<std::vector<std::vector<std::string>>>(j, "options", at)) {
    if (pair.size() != 2) at["options"].fail("expected [flag, value] pairs");
    r.options.emplace_back(pair[0], pair[1]);
  }
  r.reproduce = field<std::string>(j, "reproduce", at);
  r.seed = field<unsigned long long>(j, "seed", at), r.has_seed = true;
  const json& shard = member(j, "shard", at);
  r.shard_index = field<int>(shard, "index", at["shard"]);
  r.shard_count = field<int>(shard, "count", at["shard"]);
  const json& source = member(shard, "source", at["shard"]);
  r.shard_source = source.is_null() ? "" : field<std::string>(shard, "source", at["shard"]);
  r.started = field<std::string>(j, "started", at);
  r.seconds = field<double>(j, "seconds", at);
  r.status = field<std::string>(j, "status", at);
  r.exit_code = member(j, "exit_code", at).is_null() ? -1 : field<int>(j, "exit_code", at);
  r.passed = r.status == "passed";
  r.outcome = field<std::string>(j, "outcome", at);
  r.incomplete = field<std::vector<std::string>>(j, "incomplete", at);
  r.notes = field<std::vector<std::string>>(j, "notes", at);
  r.faults = field<std::string>(j, "faults", at);
  if (j.contains("model")) {
    r.model_path = field<std::string>(j["model"], "path", at["model"]);
    r.model_hash = field<std::string>(j["model"], "hash", at["model"]);
  }
}

void backends_from(const json& j, const At& at, RunRecord& r) {
  const json& backends = member(j, "backends", at);
  for (size_t i = 0; i < backends.size(); ++i) {
    const At b = at["backends"][i];
    BackendRecord record;
    record.spec = field<std::string>(backends[i], "backend", b);
    const Result<EngineTraits> traits = traits_from_json(member(backends[i], "traits", b));
    if (!traits.ok()) b["traits"].fail(traits.error());
    record.declared = traits.value();
    record.traits = traits_summary(record.declared, "");
    record.observable = observable_features(record.declared.operations);
    record.isolated = field<bool>(backends[i], "isolated", b);
    r.backends.push_back(std::move(record));
  }
}

}  // namespace

RunRecord run_from_json(const std::string& text, const std::string& source) {
  const At at{source, ""};
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) at.fail("not JSON (an unfinished or damaged report?)");
  if (!j.is_object() || !j.contains("schema")) at.fail("not a kvcheck report (no \"schema\")");
  if (j["schema"] != kReportSchema) {
    at.fail("schema " + j["schema"].dump() + "; this kvcheck reads schema " +
            std::to_string(kReportSchema) + " (run the shards with the same kvcheck build)");
  }
  RunRecord r;
  header_from(j, at, r);
  if (r.command != "campaign") {
    at.fail("a report of `kvcheck " + r.command + "`, not of a campaign");
  }
  backends_from(j, at, r);
  const json& tallies = member(j, "properties", at);
  for (size_t i = 0; i < tallies.size(); ++i) {
    r.tallies.push_back(tally_from(tallies[i], at["properties"][i], r));
  }
  const json& failures = member(j, "failures", at);
  for (size_t i = 0; i < failures.size(); ++i) {
    r.failures.push_back(failure_from(failures[i], at["failures"][i]));
  }
  r.kill_seed = field<unsigned long long>(j, "kill_matrix_seed", at);
  r.kill_cases = field<int>(j, "kill_cases", at);
  r.kill_matrix_done = field<bool>(j, "kill_matrix_done", at);
  const json& kills = member(j, "kill_matrix", at);
  for (size_t i = 0; i < kills.size(); ++i) {
    r.kills.push_back(kill_from(kills[i], at["kill_matrix"][i]));
  }
  return r;
}

}  // namespace kvcheck::cli
