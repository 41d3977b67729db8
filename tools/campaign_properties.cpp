// The campaign's property phase: every (property, backend) pair in turns of
// --turn-cases cases until --cases or the time budget is spent. Each turn is
// a hunt with a seed of its own (derived from the campaign's seed, the pair
// and the turn's number), run in the backend's hunt worker, so a crash is a
// failure with a case file and the campaign goes on. A shard runs its own
// turns of each pair (tools/shard.h), and only turns that ran to their end
// (or failed) count: a report then always stands at turn boundaries, which
// is where a killed shard continues.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "model/rng.h"
#include "model/status.h"
#include "properties/rc/hunt_worker.h"
#include "properties/runner.h"
#include "tools/cache_timeline.h"
#include "tools/campaign.h"
#include "tools/counted.h"
#include "tools/error_map.h"
#include "tools/failure_report.h"
#include "tools/interrupt.h"
#include "tools/shard.h"

namespace kvcheck::cli {

namespace {

// The scenario classes the coverage report counts, in its order: the
// model, the storage, each schedule call and the shapes of erase and shift
// that tell a cell's index from its position.
struct CoverageClass {
  const char* name;
  bool rcgen::Coverage::*has;
};
constexpr CoverageClass kCoverageClasses[] = {
    {"gpt2", &rcgen::Coverage::gpt2},
    {"mha", &rcgen::Coverage::mha},
    {"gqa", &rcgen::Coverage::gqa},
    {"mqa", &rcgen::Coverage::mqa},
    {"f32", &rcgen::Coverage::f32},
    {"bf16", &rcgen::Coverage::bf16},
    {"f16", &rcgen::Coverage::f16},
    {"q8_0", &rcgen::Coverage::q8_0},
    {"q8_0 2 blocks", &rcgen::Coverage::q8_multi_block},
    {"paged", &rcgen::Coverage::paged},
    {"small pool", &rcgen::Coverage::small_pool},
    {"prefix cache", &rcgen::Coverage::prefix_cache},
    {"window", &rcgen::Coverage::window},
    {"window wraps", &rcgen::Coverage::window_wraps},
    {"step: prefill chunk", &rcgen::Coverage::prefill},
    {"step: decode", &rcgen::Coverage::decode},
    {"step: batched", &rcgen::Coverage::batched_step},
    {"step: mixed", &rcgen::Coverage::mixed_step},
    {"step: 1-token chunk", &rcgen::Coverage::one_token_chunk},
    {"at capacity", &rcgen::Coverage::at_capacity},
    {"finish", &rcgen::Coverage::finish},
    {"reused row", &rcgen::Coverage::reused_row},
    {"reset", &rcgen::Coverage::reset},
    {"fork", &rcgen::Coverage::fork},
    {"truncate", &rcgen::Coverage::truncate},
    {"rollback (n > 0)", &rcgen::Coverage::rollback},
    {"fork mid-block, then a write", &rcgen::Coverage::cow_write},
    {"flush", &rcgen::Coverage::flush},
    {"erase", &rcgen::Coverage::erase},
    {"shift", &rcgen::Coverage::shift},
    {"erase middle, then step", &rcgen::Coverage::erase_middle_then_step},
    {"shift up", &rcgen::Coverage::shift_up},
    {"shift middle, then step", &rcgen::Coverage::shift_middle_then_step},
    {"fed where index != position", &rcgen::Coverage::fed_with_gap},
    {"div", &rcgen::Coverage::div},
    {"fed after a div shared a position", &rcgen::Coverage::fed_with_shared_position},
    {"verify", &rcgen::Coverage::verify},
    {"verify: reject all", &rcgen::Coverage::verify_reject_all},
    {"verify: accept all", &rcgen::Coverage::verify_accept_all},
    {"verify: one draft", &rcgen::Coverage::verify_one_draft},
    {"verify: across blocks", &rcgen::Coverage::verify_across_blocks},
    {"verify: forked", &rcgen::Coverage::verify_forked},
    {"abort", &rcgen::Coverage::abort},
    {"abort, then a hit on its prefix", &rcgen::Coverage::hit_after_abort},
    {"cache keys", &rcgen::Coverage::cache_keys},
    {"shared prompt across keys", &rcgen::Coverage::shared_prompt_across_keys},
    {"prompt logits on a hit", &rcgen::Coverage::prompt_logits},
    {"offload", &rcgen::Coverage::offload},
    {"offload, then a step", &rcgen::Coverage::offload_then_step},
    {"head_dim >= 64", &rcgen::Coverage::wide_head},
    {"restore", &rcgen::Coverage::restore},
    {"restore, then a step", &rcgen::Coverage::restore_then_step},
};
static_assert(std::size(kCoverageClasses) <= 64, "the coverage mask is 64 bits");

uint64_t coverage_mask(const rcgen::Coverage& c) {
  uint64_t mask = 0;
  for (size_t i = 0; i < std::size(kCoverageClasses); ++i) {
    if (c.*kCoverageClasses[i].has) mask |= uint64_t(1) << i;
  }
  return mask;
}

// What the worker tells of one case: "AP RATIO MASK DRAWN USED DIGEST
// REASON" (applicable and passed as 0/1, the error/bound ratio, the coverage
// mask, the cache features the scenario could use and those the engine said
// it used (feature_use.h), the case's digest over its scenario and all of
// this, why it was not applicable). Short and cheap: a campaign runs
// thousands of cases a second.
std::string describe_case(const Scenario& s, const Verdict& v) {
  char head[96];
  const rcgen::Coverage c = rcgen::coverage(s);
  std::snprintf(head, sizeof head, "%d%d %.17g %" PRIu64 " %u %u", v.applicable ? 1 : 0,
                v.passed ? 1 : 0, v.worst_ratio, coverage_mask(c),
                unsigned(rcgen::drawn_features(c)), unsigned(v.features_used));
  std::string reason;
  if (!v.applicable) {
    // "P4 reset: not applicable: the engine lacks reset" -> "the engine lacks reset".
    const std::string marker = "not applicable: ";
    const size_t at = v.summary.find(marker);
    reason = at == std::string::npos ? v.summary : v.summary.substr(at + marker.size());
  }
  const uint64_t digest = fnv1a64(std::string(head) + "|" + reason, scenario_digest(s));
  return std::string(head) + " " + digest_hex(digest) + " " + reason;
}

// One case into a turn's tally; `case_number` is its place in the pair's
// stream, for the digest.
void count_case(Tally& t, const std::string& description, int64_t case_number) {
  const bool applicable = description.size() > 1 && description[0] == '1';
  const bool passed = description.size() > 1 && description[1] == '1';
  char* end = nullptr;
  const double ratio = std::strtod(description.c_str() + 3, &end);
  const auto mask = uint64_t(std::strtoull(end, &end, 10));
  const auto drawn = FeatureMask(std::strtoul(end, &end, 10));
  const auto used = FeatureMask(std::strtoul(end, &end, 10));
  const auto digest = uint64_t(std::strtoull(end, &end, 16));
  t.digest += case_digest_share(t.property, t.backend_index, case_number, digest);
  ++t.cases;
  if (!applicable) {
    ++t.not_applicable;
    ++t.not_applicable_why[*end == ' ' ? std::string(end + 1) : std::string()];
  } else if (passed) {
    ++t.passed;
  }
  t.worst_ratio = std::max(t.worst_ratio, ratio);
  if (applicable && (has_error_bound(t.property) || ratio > 0)) {
    ++t.ratio_histogram[size_t(ratio_bucket(passed ? ratio : 1.0))];
  }
  for (size_t i = 0; i < std::size(kCoverageClasses); ++i) {
    t.coverage[kCoverageClasses[i].name] += (mask >> i) & 1;  // 0 too: never drawn shows
  }
  // Proof of use counts the checked cases that could use a feature (one not
  // applicable ran nothing), and of those the ones in which it happened; a
  // property's own derived runs (P12's refeeds) may use it elsewhere too.
  for (const FeatureRow& row : feature_rows()) {
    const bool seen_here = row.observed_by.empty() || row.observed_by == property_label(t.property);
    const bool could = applicable && seen_here && (drawn & feature_bit(row.feature)) != 0;
    FeatureCount& n = t.features[std::string(row.name)];
    n.drawn += could;
    n.used += could && (used & feature_bit(row.feature)) != 0;
  }
}

// A turn's hunt seed: the campaign's seed, the pair and the turn. So a
// property's cases do not depend on which other properties ran, and
// `--property P1` draws the same P1 cases as the whole campaign. The backend
// counts by its place among the --backend strings, not by its text, which
// may hold a path that differs from one checkout to the next.
uint64_t turn_seed(uint64_t seed, const Tally& t, int64_t turn) {
  const std::string pair =
      std::string(property_name(t.property)) + "|" + std::to_string(t.backend_index);
  SplitMix64 mix(seed ^ fnv1a64(pair, kFnv1a64Basis));
  mix.next();
  return mix.next() + uint64_t(turn) * 0x9e3779b97f4a7c15ull;
}

rcgen::HuntSpec spec_for(Campaign& c, const std::vector<Tally>& tallies, const std::string& job) {
  size_t index = 0;
  uint64_t seed = 0;
  int cases = 0;
  int64_t first_case = 0;
  std::sscanf(job.c_str(), "%zu %" SCNu64 " %d %" SCNd64, &index, &seed, &cases, &first_case);
  const Tally& t = tallies.at(index);
  rcgen::HuntSpec spec;
  spec.subject = c.subjects[t.backend_index];
  spec.property = t.property;
  spec.emphasis = rcgen::emphasis_for(t.property);
  spec.options.traits = spec.subject->traits;
  spec.options.model = c.model;
  if (c.options.scenarios_per_model > 1) {
    std::shared_ptr<rcgen::ModelReuse>& reuse = c.model_reuse[index];
    if (!reuse) {
      reuse = std::make_shared<rcgen::ModelReuse>();
      reuse->scenarios_per_model = c.options.scenarios_per_model;
      reuse->key = fnv1a64("models", turn_seed(c.seed, t, 0));
    }
    reuse->next_scenario = first_case;  // the turn's place in the pair's stream
    spec.options.model_reuse = reuse;
  }
  spec.options.seed = seed;
  spec.options.max_cases = cases;
  spec.options.max_shrink_steps = c.options.shrink_steps;
  spec.options.scenario_shrink_steps = c.options.shrink_steps;
  spec.options.deadline = c.deadline;
  // Where the check runs: in the caller for an exec: backend, whose one
  // child serves every case and may carry state from one to the next.
  CaseHistory* history = &c.histories[t.backend_index];
  const Property property = t.property;
  spec.describe = [history, property](const Scenario& s, const Verdict& v) {
    history->record(property, s, v);
    return describe_case(s, v);
  };
  return spec;
}

void record_failure(Campaign& c, Tally& t, const rcgen::HuntResult& r, uint64_t seed,
                    bool crashed) {
  t.failed = true;
  t.failure = r.verdict.summary;
  const Backend& backend = c.backends[t.backend_index];
  FailureRecord f;
  f.property = t.property;
  f.backend = t.backend;
  f.faults = c.faults.to_string();
  f.verdict = r.verdict;
  f.case_path = report_failure(r, t.property, backend, c.faults, seed, c.options.failures_dir,
                               &c.histories[t.backend_index], c.reference_specs[t.backend_index]);
  f.case_text = f.case_path.empty() ? "" : read_text_file(f.case_path);
  // Maps and timelines run the engine again in this process: not after a
  // crash, which would take the campaign down with it.
  if (!c.options.html_path.empty() && r.counterexample && !crashed) {
    const EngineUnderTest& subject = *c.subjects[t.backend_index];
    f.error_maps = error_maps(*r.counterexample, r.verdict, subject);
    f.timeline = cache_timeline(*r.counterexample, subject);
  }
  c.record.failures.push_back(std::move(f));
}

std::string tally_label(const Tally& t) {
  return std::string(property_label(t.property)) + " " + std::string(property_name(t.property));
}

// The tallies, one per (property, backend); a continued shard has them
// from its report already.
void make_tallies(Campaign& c) {
  std::vector<Tally>& tallies = c.record.tallies;
  const bool restored = !tallies.empty();
  if (restored && tallies.size() != c.backends.size() * c.properties.size()) {
    throw InputError("the continued report holds " + std::to_string(tallies.size()) +
                     " property tallies, this campaign " +
                     std::to_string(c.backends.size() * c.properties.size()));
  }
  size_t i = 0;
  for (size_t b = 0; b < c.backends.size(); ++b) {
    for (Property p : c.properties) {
      Tally t;
      t.property = p;
      t.backend = c.backends[b].spec;
      t.backend_index = b;
      t.never_applies = never_applicable(p, *c.subjects[b], c.model.get());
      if (restored) {
        tallies[i].backend_index = b;
        tallies[i++].never_applies = t.never_applies;
      } else {
        tallies.push_back(t);
      }
    }
  }
}

// One turn of one pair: the shard's next turn of it, as a hunt in the
// backend's worker. Its cases count only once it has run to its end (or
// failed); one the time or a signal cut runs again if the shard continues.
struct Turn {
  Campaign& c;
  size_t i;
  rcgen::HuntWorker& worker;
  Progress& progress;
  int& total;

  // False when the pair has no turn left here.
  bool run() {
    Tally& t = c.record.tallies[i];
    const CampaignOptions& o = c.options;
    const int64_t turn = shard_turn(c.shard, t.turns);
    const int cases = turn_case_count(turn, o.turn_cases, o.cases);
    if (t.failed || !t.never_applies.empty() || cases == 0) return false;
    const uint64_t seed = turn_seed(c.seed, t, turn);
    const int64_t first = turn_first_case(turn, o.turn_cases);
    const std::string job = std::to_string(i) + " " + std::to_string(seed) + " " +
                            std::to_string(cases) + " " + std::to_string(first);
    Tally part;
    part.property = t.property, part.backend = t.backend, part.backend_index = t.backend_index;
    int shrink_tries = 0;
    const auto heard = [&](const std::string& description, bool shrinking) {
      if (shrinking) {
        progress.update(tally_label(t) + " on " + t.backend + ": shrinking a failure, " +
                        std::to_string(++shrink_tries) + " candidates run");
        return;
      }
      count_case(part, description, first + part.cases);
      ++total;
      progress.update(tally_label(t) + " on " + t.backend + ": " +
                      counted(t.cases + part.cases, "case") + " | " + std::to_string(total) +
                      " in all, " + std::to_string(int(total / std::max(c.elapsed(), 1e-3))) +
                      " cases/s");
    };
    const int deaths = worker.deaths();
    const auto began = Campaign::Clock::now();
    const rcgen::HuntResult r = worker.run(job, heard);
    const double seconds = std::chrono::duration<double>(Campaign::Clock::now() - began).count();
    // A signal may cause a failure; a cut turn would draw other cases than
    // the same turn run whole. Neither counts.
    if (interrupted() || (r.cut && !r.failed)) {
      t.seconds += seconds;
      return true;
    }
    part.seconds = seconds;
    part.turns = 1;
    add_tally(t, part);
    if (r.failed) failed(t, r, seed, turn, worker.deaths() != deaths);
    write_checkpoint(c, false);
    return true;
  }

  void failed(Tally& t, const rcgen::HuntResult& r, uint64_t seed, int64_t turn, bool crashed) {
    progress.done();
    if (r.cut) {
      c.record.incomplete.push_back(tally_label(t) + " on " + t.backend +
                                    ": the time budget cut its shrink (" +
                                    std::to_string(r.shrink_steps) + " steps run)");
    }
    record_failure(c, t, r, seed, crashed);
    t.first_failing_turn = int(turn);
    c.record.failures.back().turn = int(turn);
  }
};

// Under --cases, the pairs whose turns the time budget did not all run.
void note_unfinished(Campaign& c) {
  const CampaignOptions& o = c.options;
  if (o.cases == 0 || interrupted()) return;
  const std::string whose =
      c.shard.count > 1
          ? " (shard " + std::to_string(c.shard.index) + " of " + std::to_string(c.shard.count) +
                " runs " + std::to_string(shard_case_budget(c.shard, o.turn_cases, o.cases)) + ")"
          : "";
  for (const Tally& t : c.record.tallies) {
    if (t.failed || !t.never_applies.empty()) continue;
    if (turn_case_count(shard_turn(c.shard, t.turns), o.turn_cases, o.cases) == 0) continue;
    c.record.incomplete.push_back(tally_label(t) + " on " + t.backend + ": " +
                                  std::to_string(t.cases) + " of --cases " +
                                  std::to_string(o.cases) + whose + " ran within the time budget");
  }
}

}  // namespace

void run_properties(Campaign& c, Progress& progress) {
  make_tallies(c);
  std::vector<Tally>& tallies = c.record.tallies;
  std::vector<std::unique_ptr<rcgen::HuntWorker>> workers;  // [backend]
  for (size_t b = 0; b < c.backends.size(); ++b) {
    rcgen::WorkerOptions w;
    w.isolate = c.isolated(b);
    w.case_timeout_seconds = c.options.case_timeout;
    w.stop = [] { return interrupted() != 0; };
    workers.push_back(std::make_unique<rcgen::HuntWorker>(
        [&c, &tallies](const std::string& job) { return spec_for(c, tallies, job); }, w));
  }
  int total = 0;
  for (bool progress_made = true; progress_made && !c.out_of_time();) {
    progress_made = false;
    for (size_t i = 0; i < tallies.size() && !c.out_of_time() && !interrupted(); ++i) {
      Turn turn{c, i, *workers[tallies[i].backend_index], progress, total};
      progress_made = turn.run() || progress_made;
    }
  }
  progress.done();
  note_unfinished(c);
}

}  // namespace kvcheck::cli
