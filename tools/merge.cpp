// Adding shards up (tools/merge.h). The reports must be of one campaign
// (campaign_difference); each tally of the merged run is the sum of the
// shards' tallies of its pair (add_tally), so a pair's failure is the one of
// its earliest failing turn, as in one unsharded run.
#include "tools/merge.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "model/status.h"
#include "properties/repro/failure_file.h"
#include "tools/campaign.h"

namespace kvcheck::cli {

namespace {

std::string duration_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}

// [shard index] its report, or null when none was given.
std::vector<const ShardReport*> by_index(const std::vector<ShardReport>& reports) {
  const ShardReport& first = reports.front();
  for (const ShardReport& r : reports) {
    const std::string d = campaign_difference(first.run, first.path, r.run, r.path);
    if (!d.empty()) throw InputError("not shards of one campaign: " + d);
  }
  const int count = first.run.shard_count;
  std::vector<const ShardReport*> shards(size_t(count), nullptr);
  for (const ShardReport& r : reports) {
    const int i = r.run.shard_index;
    if (i < 0 || i >= count) {
      throw InputError(r.path + ": shard index " + std::to_string(i) + " of " +
                       std::to_string(count) + " is out of range");
    }
    if (shards[size_t(i)] != nullptr) {
      throw InputError("two reports of shard " + std::to_string(i) + " of " +
                       std::to_string(count) + ": " + shards[size_t(i)]->path + " and " + r.path +
                       " (give one: a shard run again continues its own report)");
    }
    shards[size_t(i)] = &r;
  }
  return shards;
}

// The merged tallies start as the first report's pairs, with nothing counted.
std::vector<Tally> empty_tallies(const RunRecord& first) {
  std::vector<Tally> tallies;
  for (const Tally& t : first.tallies) {
    Tally e;
    e.property = t.property, e.backend = t.backend, e.backend_index = t.backend_index;
    e.never_applies = t.never_applies;
    tallies.push_back(std::move(e));
  }
  return tallies;
}

// One shard into the merged run: its row, its tallies, and what it did not
// finish as incomplete lines.
void add_shard(RunRecord& merged, int index, const ShardReport* report) {
  ShardRecord& s = merged.shards.emplace_back();
  s.index = index;
  const std::string label =
      "shard " + std::to_string(index) + " of " + std::to_string(merged.shard_count);
  if (report == nullptr) {
    s.status = "missing";
    merged.incomplete.push_back(label + ": no report (missing)");
    return;
  }
  const RunRecord& r = report->run;
  s.report = report->path;
  s.status = r.status == "running" ? "killed" : r.status;
  s.seconds = r.seconds;
  s.digest = run_digest(r);
  for (size_t i = 0; i < r.tallies.size(); ++i) {
    Tally& into = merged.tallies.at(i);
    if (into.property != r.tallies[i].property || into.backend != r.tallies[i].backend) {
      throw InputError(report->path + ": properties[" + std::to_string(i) +
                       "] is another pair than in the other reports");
    }
    add_tally(into, r.tallies[i]);
    s.cases += r.tallies[i].cases;
  }
  if (s.status == "killed" || s.status == "interrupted") {
    merged.incomplete.push_back(label + " (" + report->path + "): " + s.status + " after " +
                                duration_text(r.seconds) +
                                "; its report holds the turns it finished (run the shard again "
                                "to continue it)");
  }
  for (const std::string& line : r.incomplete) {
    merged.incomplete.push_back(label + ": " + line);
  }
  for (const std::string& note : r.notes) {
    if (std::find(merged.notes.begin(), merged.notes.end(), note) == merged.notes.end()) {
      merged.notes.push_back(note);
    }
  }
  if (index == 0) {
    merged.kills = r.kills;
    merged.kill_matrix_done = r.kill_matrix_done;
  }
  merged.started = merged.started.empty() ? r.started : std::min(merged.started, r.started);
  merged.seconds = std::max(merged.seconds, r.seconds);
}

// Every shard's failures, each pair's in turn order, one per distinct case.
std::vector<FailureRecord> distinct_failures(const std::vector<const ShardReport*>& shards,
                                             const std::vector<Tally>& tallies) {
  std::vector<FailureRecord> all;
  for (const ShardReport* s : shards) {
    if (s != nullptr) all.insert(all.end(), s->run.failures.begin(), s->run.failures.end());
  }
  const auto pair_of = [&](const FailureRecord& f) {
    for (size_t i = 0; i < tallies.size(); ++i) {
      if (tallies[i].property == f.property && tallies[i].backend == f.backend) return i;
    }
    return tallies.size();
  };
  std::stable_sort(all.begin(), all.end(), [&](const FailureRecord& a, const FailureRecord& b) {
    return std::pair(pair_of(a), unsigned(a.turn)) < std::pair(pair_of(b), unsigned(b.turn));
  });
  std::vector<FailureRecord> out;
  std::set<std::string> seen;
  for (FailureRecord& f : all) {
    const std::string key = f.case_text.empty() ? std::string(property_name(f.property)) + "|" +
                                                      f.backend + "|" + f.verdict.summary
                                                : case_content_hash(f.case_text);
    if (seen.insert(key).second) out.push_back(std::move(f));
  }
  return out;
}

std::string merged_incomplete_outcome(const RunRecord& merged) {
  int unfinished = 0;
  for (const ShardRecord& s : merged.shards) {
    unfinished += s.status == "missing" || s.status == "killed" || s.status == "interrupted" ||
                  s.status == "incomplete";
  }
  return "incomplete: " + std::to_string(unfinished) + " of the " +
         std::to_string(merged.shard_count) + " shards did not finish their cases; nothing failed";
}

}  // namespace

RunRecord merge_reports(const std::vector<ShardReport>& reports) {
  if (reports.empty()) throw InputError("no reports to merge");
  const std::vector<const ShardReport*> shards = by_index(reports);
  const RunRecord& first = reports.front().run;
  RunRecord merged;
  merged.command = "merge";
  merged.version = first.version, merged.commit = first.commit;
  merged.options = first.options;
  merged.seed = first.seed, merged.has_seed = true;
  merged.shard_count = first.shard_count;
  merged.model_path = first.model_path, merged.model_hash = first.model_hash;
  merged.faults = first.faults;
  merged.reproduce = reproduce_command(first.options);
  merged.backends = first.backends;
  merged.kill_cases = first.kill_cases, merged.kill_seed = first.kill_seed;
  merged.tallies = empty_tallies(first);
  for (size_t i = 0; i < shards.size(); ++i) add_shard(merged, int(i), shards[i]);
  merged.failures = distinct_failures(shards, merged.tallies);
  decide_verdict(merged, first.faults != "none", merged_incomplete_outcome(merged));
  return merged;
}

void gather_case_files(RunRecord& merged, const std::string& folder) {
  for (FailureRecord& f : merged.failures) {
    if (f.case_text.empty()) continue;
    std::string stem = std::filesystem::path(f.case_path).stem().string();
    if (stem.empty()) stem = std::string(property_label(f.property)) + "-merged";
    const Result<std::string> path = write_new_file(folder, stem, ".case", f.case_text);
    if (!path.ok()) throw InputError("--failures: " + path.error());
    f.case_path = path.value();
  }
}

}  // namespace kvcheck::cli
