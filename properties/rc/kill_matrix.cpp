#include "properties/rc/kill_matrix.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace kvcheck::rcgen {

const std::vector<CatalogueEntry>& fault_catalogue() {
  using P = Property;
  static const std::vector<CatalogueEntry> entries = {
      {Fault::kSharedLayerCache, {P::kOracle, P::kCacheState}, 8, 6},
      {Fault::kSharedRows, {P::kOracle, P::kBatch, P::kCacheState}, 7, 7},
      {Fault::kDecodePositionZero, {P::kOracle, P::kChunking, P::kCacheState}, 7, 6},
      {Fault::kChunkPositionRestart, {P::kOracle, P::kChunking, P::kCacheState}, 8, 7},
      {Fault::kPositionLagAfterFirst, {P::kOracle, P::kCacheState}, 7, 6},
      {Fault::kPositionBumpPerLayer, {P::kOracle, P::kCacheState}, 6, 6},
      {Fault::kTiledKvHeads, {P::kOracle, P::kGqa}, 8, 8},
      {Fault::kResetKeepsKv, {P::kOracle, P::kReset, P::kCacheState}, 9, 9},
      {Fault::kResetKeepsPosition, {P::kOracle, P::kReset, P::kCacheState}, 9, 9},
      {Fault::kMaskTopLeft, {P::kOracle, P::kChunking}, 7, 6},
      {Fault::kAppendOverwrites, {P::kOracle, P::kChunking, P::kCacheState}, 7, 6},
      {Fault::kCompactionTableOnly, {P::kOracle, P::kCompaction}, 10, 7},
      {Fault::kRopeReapplied, {P::kOracle, P::kChunking, P::kCacheState}, 8, 7},
      {Fault::kKvSwapped, {P::kOracle, P::kCacheState}, 5, 5},
      {Fault::kCapacityWraps, {P::kCapacity}, 7, 2},
      // The operations; logits minimum 0: the fault never changes a logit
      // on its own (it shows in the pool or in unheld storage).
      {Fault::kTruncateNoop, {P::kOracle, P::kRollback, P::kCacheState}, 8, 6},
      {Fault::kTruncateKeepsPosition, {P::kOracle, P::kRollback, P::kCacheState}, 8, 8},
      {Fault::kResetClearsLayer0Only, {P::kPoison}, 0, 7},
      {Fault::kCowSkipped, {P::kSharing}, 12, 10},
      {Fault::kForkSharesPartialBlock, {P::kPool}, 0, 7},
      {Fault::kFreedBlockStillReferenced, {P::kPool}, 0, 8},
      {Fault::kRefcountLeak, {P::kPool}, 0, 8},
      {Fault::kBlockAliasing, {P::kOracle, P::kCacheState}, 6, 6},
      // Quantized K/V (q8_0): P6 checks every stored scale.
      {Fault::kKvScaleDropped, {P::kOracle, P::kCacheState}, 5, 5},
      {Fault::kKvScalePerTensor, {P::kCacheState}, 5, 5},
      {Fault::kKvScaleSharedKv, {P::kCacheState}, 5, 5},
      // The prefix cache and small pools (docs/FAULTS.md derives the sizes).
      {Fault::kPrefixHashOnly, {P::kOracle, P::kCacheState, P::kPrefix}, 9, 9},
      {Fault::kPrefixHitExtraBlock, {P::kCacheState}, 12, 10},
      {Fault::kRefusalLeavesHalfTable, {P::kOracle, P::kPool}, 0, 6},
      // Sliding windows (docs/FAULTS.md derives the sizes; W is not counted).
      {Fault::kWindowOffByOne, {P::kOracle}, 5, 5},
      {Fault::kWindowPerChunk, {P::kOracle, P::kChunking}, 7, 7},
      {Fault::kRingIndexUnwrapped, {P::kOracle, P::kCacheState}, 6, 6},
      // Context shift (docs/FAULTS.md): P6 sees the moved cell's K or V
      // right after the shift (6); the logits need one more decode (8). Their
      // rows draw every case with a shift (emphasis_for_fault).
      {Fault::kShiftKeepsK, {P::kCacheState}, 8, 6},
      {Fault::kShiftRotatesV, {P::kCacheState}, 8, 6},
      {Fault::kShiftWrongSign, {P::kCacheState}, 8, 6},
      {Fault::kTruncateLate, {P::kOracle, P::kRollback, P::kPoison}, 9, 6},
      {Fault::kTruncateAllNoop, {P::kOracle, P::kRollback, P::kCacheState}, 8, 6},
      {Fault::kTruncateKeepsLast, {P::kOracle, P::kRollback, P::kCacheState}, 8, 6},
      {Fault::kAbortFreesCached, {P::kOracle, P::kPool}, 10, 6},
      // Cache keys change no logit: only P15's check of the hit's source.
      {Fault::kPrefixIgnoresKey, {P::kPrefix}, 0, 9},
      // The reused rows keep the buffer's previous step: one step before
      // the hit that is not the source's first chunk (11).
      {Fault::kHitPromptLogitsStale, {P::kOracle, P::kPrefix}, 11, 11},
      // A second memory tier: P6 reads the host copy right after the
      // offload (6); the logits need the step that brings it back (8). The
      // drifting counters show only in P13, after that step.
      {Fault::kOffloadBeforeWrite, {P::kOracle, P::kCacheState}, 8, 6},
      {Fault::kOffloadCountsDrift, {P::kPool}, 0, 8},
      // Save and restore: P6 sees the kept cell at the restore (7); the
      // logits need one more token (9).
      {Fault::kRestoreKeepsTail, {P::kOracle, P::kRollback, P::kCacheState}, 9, 7},
  };
  return entries;
}

const HuntResult* KillMatrixRow::smallest() const {
  const HuntResult* best = any.failed ? &any : nullptr;
  for (const HuntResult& r : cells) {
    if (r.failed && (best == nullptr || r.counterexample->size() < best->counterexample->size())) {
      best = &r;
    }
  }
  return best;
}

Emphasis emphasis_for_fault(Fault fault) {
  const std::string_view needs = fault_needs(fault);
  if (needs == "shift") return Emphasis::kContextShift;
  if (needs == "prefix_cache" || needs == "abort" || needs == "cache_keys" ||
      needs == "prompt_logits") {
    return Emphasis::kPrefixCache;
  }
  if (needs == "paged") return Emphasis::kForks;
  if (needs == "truncate") return Emphasis::kTruncations;
  if (needs == "save_restore") return Emphasis::kSaveRestore;
  if (needs == "offload") return Emphasis::kOffload;
  return Emphasis::kAny;
}

namespace {

// A job of the kill matrix's worker: "ROW COLUMN", the column -1 for 'any'.
std::string job_text(size_t row, int column) {
  return std::to_string(row) + " " + std::to_string(column);
}

}  // namespace

KillMatrix run_kill_matrix(const std::function<EngineUnderTest(FaultSet)>& subject_for,
                           const KillMatrixOptions& options,
                           const std::function<void(const std::string&)>& progress) {
  KillMatrix m;
  m.catalogue_applies = options.catalogue_applies;
  m.rows.push_back({"(correct engine)", std::nullopt, {}, {}, true, {}});
  for (const CatalogueEntry& e : fault_catalogue()) {
    m.rows.push_back({std::string(fault_name(e.fault)), e.fault, {}, {}, true, {}});
  }
  const auto faults_of = [&](size_t row) {
    return m.rows[row].fault ? FaultSet(*m.rows[row].fault) : FaultSet();
  };
  // Runs in the worker: the row's engine and the column's hunt.
  const auto spec_for = [&](const std::string& job) {
    size_t row = 0;
    int column = -1;
    std::sscanf(job.c_str(), "%zu %d", &row, &column);
    HuntSpec spec;
    spec.subject = std::make_shared<const EngineUnderTest>(subject_for(faults_of(row)));
    if (column >= 0) spec.property = Property(column);
    const std::optional<Fault> fault = m.rows[row].fault;
    spec.emphasis = fault && emphasis_for_fault(*fault) != Emphasis::kAny
                        ? emphasis_for_fault(*fault)
                    : spec.property ? emphasis_for(*spec.property)
                                    : Emphasis::kAny;
    spec.options.traits = spec.subject->traits;
    spec.options.seed = options.seed;
    spec.options.max_cases = fault ? options.cases_per_cell : options.correct_cases;
    spec.options.max_shrink_steps = options.max_shrink_steps;
    spec.options.scenario_shrink_steps = options.scenario_shrink_steps;
    spec.options.deadline = options.deadline;
    spec.options.stop = options.stop;
    return spec;
  };
  WorkerOptions worker = options.worker;
  if (!worker.stop) worker.stop = options.stop;
  HuntWorker hunts(spec_for, worker);
  const auto out_of_time = [&] {
    return (options.stop && options.stop()) ||
           (options.deadline && std::chrono::steady_clock::now() >= *options.deadline);
  };
  for (size_t i = 0; i < m.rows.size(); ++i) {
    KillMatrixRow& row = m.rows[i];
    if (out_of_time()) {
      row.ran = false;
      continue;
    }
    if (row.fault) {
      const EngineTraits traits = subject_for(faults_of(i)).traits;
      if (!declares(traits, fault_needs(*row.fault))) {
        row.skipped = "the backend lacks " + std::string(fault_needs(*row.fault));
        continue;
      }
    }
    if (progress) progress("kill matrix: " + row.name + ", every property per case");
    row.any = hunts.run(job_text(i, -1), {});
    row.ran = row.any.failed || !row.any.cut;
    if (row.fault) m.kill_all_seconds += row.any.seconds;
    m.total_seconds += row.any.seconds;
    if (!options.per_property) continue;
    for (int p = 0; p < kPropertyCount; ++p) {
      if (progress)
        progress("kill matrix: " + row.name + " x " + std::string(property_name(Property(p))));
      row.cells.push_back(hunts.run(job_text(i, p), {}));
      row.ran = row.ran && (row.cells.back().failed || !row.cells.back().cut);
      m.total_seconds += row.cells.back().seconds;
    }
  }
  return m;
}

namespace {

std::string cell_text(const HuntResult& r) {
  return r.failed ? std::to_string(r.cases_run) : "-";
}

}  // namespace

std::string KillMatrix::table() const {
  std::ostringstream out;
  char line[256];
  const bool per_property = !rows.empty() && !rows.front().cells.empty();
  std::snprintf(line, sizeof(line), "%-29s", "fault \\ property");
  out << line;
  if (per_property) {
    for (int p = 0; p < kPropertyCount; ++p) {
      std::snprintf(line, sizeof(line), " %4s", std::string(property_label(Property(p))).c_str());
      out << line;
    }
  }
  out << "   any  size target    x  logits-min  s(any)  killed first by\n";
  for (const KillMatrixRow& row : rows) {
    std::snprintf(line, sizeof(line), "%-29s", row.name.c_str());
    out << line;
    if (!row.ran) {
      out << "  not run: the time budget ran out\n";
      continue;
    }
    if (!row.skipped.empty()) {
      out << "  not applicable: " << row.skipped << "\n";
      continue;
    }
    for (const HuntResult& r : row.cells) {
      std::snprintf(line, sizeof(line), " %4s", cell_text(r).c_str());
      out << line;
    }
    const HuntResult* best = row.smallest();
    if (row.fault && best != nullptr) {
      const CatalogueEntry& entry = fault_catalogue()[size_t(*row.fault)];
      const int size = best->counterexample->size();
      std::snprintf(
          line, sizeof(line), "  %4s  %4d %6d %4.2f %11d %7.2f  %s\n", cell_text(row.any).c_str(),
          size, entry.shrink_target, double(size) / entry.shrink_target, entry.logits_minimum,
          row.any.seconds,
          row.any.failed ? std::string(property_label(row.any.verdict.property)).c_str() : "-");
    } else {
      std::snprintf(line, sizeof(line), "  %4s  %4s %6s %4s %11s %7.2f  %s\n",
                    cell_text(row.any).c_str(), "-", "-", "-", "-", row.any.seconds,
                    row.fault ? "SURVIVED" : "-");
    }
    out << line;
  }
  std::snprintf(line, sizeof(line),
                "\nkilling every fault (the 'any' column): %.2f s; the whole matrix: %.2f s\n",
                kill_all_seconds, total_seconds);
  out << line;
  return out.str();
}

std::string KillMatrix::counterexamples() const {
  std::ostringstream out;
  for (const KillMatrixRow& row : rows) {
    if (!row.fault || !row.ran || !row.skipped.empty()) continue;
    const HuntResult* best = row.smallest();
    const CatalogueEntry& entry = fault_catalogue()[size_t(*row.fault)];
    out << "\n== " << row.name << " (shrink target " << entry.shrink_target << ", logits minimum "
        << entry.logits_minimum << ")";
    if (best == nullptr) {
      out << ": SURVIVED every property\n";
      continue;
    }
    out << ": shrunk to size " << best->counterexample->size() << " by " << best->verdict.summary
        << "\n"
        << best->counterexample->to_text();
  }
  return out.str();
}

std::vector<std::string> KillMatrix::failures() const {
  std::vector<std::string> out;
  if (rows.empty()) return {"the kill matrix did not run"};
  const KillMatrixRow& correct = rows.front();
  for (size_t p = 0; p < correct.cells.size(); ++p) {
    const HuntResult& r = correct.cells[p];
    if (r.failed) {
      out.push_back("the correct engine fails " + std::string(property_label(Property(p))) + ": " +
                    r.verdict.summary + "\n" + r.verdict.detail +
                    (r.counterexample ? r.counterexample->to_text() : ""));
    }
  }
  if (correct.any.failed) out.push_back("the correct engine fails: " + correct.any.verdict.summary);
  for (size_t i = 1; i < rows.size(); ++i) {
    const KillMatrixRow& row = rows[i];
    if (row.ran && row.skipped.empty() && row.smallest() == nullptr) {
      out.push_back(row.name + " survived every property");
    }
  }
  return out;
}

std::vector<std::string> KillMatrix::not_run() const {
  std::vector<std::string> out;
  for (const KillMatrixRow& row : rows) {
    if (!row.ran) out.push_back(row.name + ": not run before the time budget ran out");
  }
  return out;
}

std::vector<std::string> KillMatrix::shrink_notes() const {
  std::vector<std::string> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    const KillMatrixRow& row = rows[i];
    const HuntResult* best = row.smallest();
    if (!row.ran || !row.skipped.empty() || best == nullptr) continue;
    const CatalogueEntry& entry = fault_catalogue()[i - 1];
    // Shrink quality: a counterexample a person can read in a minute. The
    // generators always draw a sequence with a token in a step, so nothing
    // they make is smaller than kGeneratedFloor; kvcheck shrink, which can
    // drop the last sequence, is held to the target itself (tests/repro).
    const int allowed = 2 * std::max(entry.shrink_target, kGeneratedFloor);
    if (catalogue_applies && best->counterexample && best->counterexample->size() > allowed) {
      out.push_back(row.name + ": shrunk to " + std::to_string(best->counterexample->size()) +
                    ", more than twice the hand-derived shrink target " +
                    std::to_string(entry.shrink_target) + " (floor " +
                    std::to_string(kGeneratedFloor) + ")");
    }
    if (row.cells.empty() || !catalogue_applies) continue;
    for (Property p : entry.caught_by) {
      if (!row.cells[size_t(p)].failed) {
        out.push_back(row.name + ": docs/FAULTS.md says " + std::string(property_label(p)) +
                      " catches it, but it survived");
      }
    }
  }
  return out;
}

std::vector<std::string> KillMatrix::problems() const {
  std::vector<std::string> out = failures();
  for (const std::vector<std::string>& more : {not_run(), shrink_notes()}) {
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

}  // namespace kvcheck::rcgen
