// The fault kill matrix: every property against every fault of
// engine/faults.h, on generated scenarios with a fixed seed and a bounded
// number of cases, plus a row for the correct engine (which must survive
// everything). The `mutants` ctest gates on it and `kvcheck campaign` prints
// it; both go through here so there is one matrix, not two.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/hunt.h"
#include "properties/rc/hunt_worker.h"

namespace kvcheck::rcgen {

// docs/FAULTS.md, table "The fault catalogue": who catches each fault, the
// size of the smallest schedule whose logits differ (logits minimum) and of
// the smallest scenario some property fails on (shrink target), both derived
// by hand there. Keep the two in step.
struct CatalogueEntry {
  Fault fault;
  std::vector<Property> caught_by;
  int logits_minimum;
  int shrink_target;
};
const std::vector<CatalogueEntry>& fault_catalogue();

// The smallest scenario the generators draw: 1 layer, 1 head, 1 sequence,
// 1 token, 1 step.
inline constexpr int kGeneratedFloor = 5;

// The kill matrix's own seed: a build kills the same faults in the same
// number of cases on every machine, whatever seed a campaign runs with.
inline constexpr uint64_t kKillMatrixSeed = 0x6b76;

struct KillMatrixOptions {
  uint64_t seed = kKillMatrixSeed;
  int cases_per_cell = 100;         // per (fault, property)
  int correct_cases = 1000;         // per property for the correct engine
  bool per_property = true;         // false: only the 'any' column (fast)
  int max_shrink_steps = 0;         // per hunt; 0: unbounded
  int scenario_shrink_steps = 300;  // per failure, after RapidCheck's (HuntOptions)
  // Rows not finished by then (or once `stop` says so) are marked not run:
  // the matrix is incomplete, not failed.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::function<bool()> stop;
  // Hunts in a worker process, so that a fault that crashes is a kill.
  WorkerOptions worker = in_process();
  // The "caught by" column of docs/FAULTS.md holds for the in-tree engines as
  // declared; under weakened traits (bounded invariance, a restricted
  // profile) it does not, and only survivors and the correct engine count.
  bool catalogue_applies = true;
};

// Faults that live in one operation have their rows drawn where it is: the
// shift faults with a context shift in every case, the prefix-cache faults
// with a prefix cache and shared prompts in every case.
Emphasis emphasis_for_fault(Fault fault);

struct KillMatrixRow {
  std::string name;  // fault name, or "(correct engine)"
  std::optional<Fault> fault;
  std::vector<HuntResult> cells;  // [property]; empty when !per_property
  HuntResult any;                 // check_all: every property per case
  bool ran = true;                // false when the deadline or a stop cut it before a kill
  std::string skipped;            // why a fault was not run: its operation is not declared

  // The smallest shrunk counterexample over every column, or nullptr.
  const HuntResult* smallest() const;
};

struct KillMatrix {
  std::vector<KillMatrixRow> rows;  // rows[0] is the correct engine
  double kill_all_seconds = 0;      // the 'any' column over every fault
  double total_seconds = 0;
  bool catalogue_applies = true;

  // What fails a campaign: the correct engine failing, a fault surviving its
  // case budget.
  std::vector<std::string> failures() const;
  // Rows the deadline or a stop cut: the matrix is incomplete.
  std::vector<std::string> not_run() const;
  // Shrink quality: a shrunk case over twice its hand-derived target, a
  // "caught by" property that missed its fault (per-property matrices).
  // The mutants ctest gates on them with its fixed seed; a campaign reports
  // them.
  std::vector<std::string> shrink_notes() const;
  // All three: what the mutants ctest holds against the matrix.
  std::vector<std::string> problems() const;
  std::string table() const;            // cases-to-kill per cell, sizes vs targets
  std::string counterexamples() const;  // per fault, the smallest shrunk scenario
};

// `subject_for(faults)` makes the backend's engine under test with those
// faults on (its traits bound the generated scenarios); `progress` (may be
// empty) hears one line per cell.
KillMatrix run_kill_matrix(const std::function<EngineUnderTest(FaultSet)>& subject_for,
                           const KillMatrixOptions& options,
                           const std::function<void(const std::string&)>& progress = {});

}  // namespace kvcheck::rcgen
