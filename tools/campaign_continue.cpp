// A long campaign survives being killed: it rewrites its --json report as a
// checkpoint while it runs (status "running"), and a run of the same
// campaign and shard continues from a report that did not finish instead of
// starting again (docs/DISTRIBUTED.md, "A killed shard"). Only turns that
// ran to their end are in a report, so the continued run draws exactly the
// cases the uninterrupted one would have: the same digest and verdict.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "model/status.h"
#include "tools/campaign.h"
#include "tools/report_json.h"

namespace kvcheck::cli {

namespace {

// How often a running campaign rewrites its report, at most: what a kill
// can lose. KVCHECK_CHECKPOINT_SECONDS changes it (0: after every turn).
double checkpoint_seconds() {
  static const double seconds = [] {
    const char* text = std::getenv("KVCHECK_CHECKPOINT_SECONDS");
    if (text == nullptr) return 5.0;
    char* end = nullptr;
    const double s = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(s >= 0 && s <= 86400)) {
      throw InputError(std::string("KVCHECK_CHECKPOINT_SECONDS=\"") + text +
                       "\": expected seconds in [0, 86400]");
    }
    return s;
  }();
  return seconds;
}

bool is_unfinished(const std::string& status) {
  return status == "running" || status == "interrupted" || status == "incomplete";
}

// What a report at the --json path says of this run: "" when this run
// continues it, else why it starts again.
std::string why_not_continue(const Campaign& c, const RunRecord& earlier) {
  const std::string& path = c.options.json_path;
  if (!is_unfinished(earlier.status)) return "it holds a finished run (" + earlier.status + ")";
  const std::string difference = campaign_difference(earlier, path, c.record, "this run");
  if (!difference.empty()) return "it is another campaign's: " + difference;
  if (earlier.shard_index != c.shard.index) {
    return "it is shard " + std::to_string(earlier.shard_index) + "'s, this run is shard " +
           std::to_string(c.shard.index);
  }
  return "";
}

void take_over(Campaign& c, RunRecord&& earlier) {
  RunRecord& r = c.record;
  r.tallies = std::move(earlier.tallies);
  r.failures = std::move(earlier.failures);
  r.started = earlier.started;
  c.earlier_seconds = earlier.seconds;
  if (earlier.kill_matrix_done) {
    r.kills = std::move(earlier.kills);
    r.notes = std::move(earlier.notes);
    r.kill_matrix_done = true;
  }
}

}  // namespace

void write_checkpoint(Campaign& c, bool now) {
  const std::string& path = c.options.json_path;
  std::error_code ec;
  // Not into a pipe or a terminal (--json /dev/stdout): only the final report goes there.
  if (path.empty() ||
      (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))) {
    return;
  }
  const double every = checkpoint_seconds();  // checked at the first, forced, checkpoint
  const auto at = Campaign::Clock::now();
  if (!now && std::chrono::duration<double>(at - c.checkpointed).count() < every) return;
  c.checkpointed = at;
  c.record.seconds = c.earlier_seconds + c.elapsed();
  write_text_file("--json", path, run_json(c.record));
}

void continue_from_report(Campaign& c) {
  const std::string& path = c.options.json_path;
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec) ||
      std::filesystem::file_size(path, ec) == 0) {
    return;
  }
  std::string why;
  RunRecord earlier;
  try {
    earlier = run_from_json(read_text_file(path), path);
    why = why_not_continue(c, earlier);
  } catch (const InputError& e) {
    why = e.what();
  }
  if (!why.empty()) {
    std::printf("starting again, not continuing from %s: %s\n", path.c_str(), why.c_str());
    return;
  }
  int cases = 0, turns = 0;
  for (const Tally& t : earlier.tallies) cases += t.cases, turns += t.turns;
  std::printf("continuing from %s (%s after %.1f s): %d turns done, %d cases, %zu failure%s%s\n",
              path.c_str(), earlier.status.c_str(), earlier.seconds, turns, cases,
              earlier.failures.size(), earlier.failures.size() == 1 ? "" : "s",
              earlier.kill_matrix_done ? "" : "; the kill matrix runs again");
  std::fflush(stdout);
  take_over(c, std::move(earlier));
}

}  // namespace kvcheck::cli
