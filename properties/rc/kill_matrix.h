// The fault kill matrix: every property against every fault of
// engine/faults.h, on generated scenarios with a fixed seed and a bounded
// number of cases, plus a row for the correct engine (which must survive
// everything). The `mutants` ctest gates on it and `kvcheck campaign` prints
// it; both go through here so there is one matrix, not two.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/faults.h"
#include "properties/property.h"
#include "properties/rc/hunt.h"

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

struct KillMatrixOptions {
  uint64_t seed = 0x6b76;
  int cases_per_cell = 100;       // per (fault, property)
  int correct_cases = 1000;       // per property for the correct engine
  bool per_property = true;       // false: only the 'any' column (fast)
  double time_limit_seconds = 0;  // 0: none; cells not reached are marked not run
  // The "caught by" column of docs/FAULTS.md holds for the in-tree engines as
  // declared; under weakened traits (bounded invariance, a restricted
  // profile) it does not, and only survivors and the correct engine count.
  bool catalogue_applies = true;
};

struct KillMatrixRow {
  std::string name;  // fault name, or "(correct engine)"
  std::optional<Fault> fault;
  std::vector<HuntResult> cells;  // [property]; empty when !per_property
  HuntResult any;                 // check_all: every property per case
  bool ran = true;                // false when the time limit stopped it
  std::string skipped;            // why a fault was not run: its operation is not declared

  // The smallest shrunk counterexample over every column, or nullptr.
  const HuntResult* smallest() const;
};

struct KillMatrix {
  std::vector<KillMatrixRow> rows;  // rows[0] is the correct engine
  double kill_all_seconds = 0;      // the 'any' column over every fault
  double total_seconds = 0;
  bool catalogue_applies = true;

  // Problems that fail the gate: the correct engine failing, a fault
  // surviving, a "caught by" property missing its fault, a shrunk case over
  // twice its target. Empty when the matrix passes.
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
