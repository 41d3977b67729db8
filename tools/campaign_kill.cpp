// The campaign's kill matrix: the run's self-test, first. Its seed is its
// own (--kill-seed, default rcgen::kKillMatrixSeed), never the campaign's,
// and its budget is in cases (--kill-cases per fault) and shrink steps, so
// a build kills the same faults in the same number of cases on every
// machine. A fault that survives fails the run; a shrunk case over twice its
// hand-derived size is reported (the mutants ctest gates on that).
#include <cstdio>

#include "properties/rc/kill_matrix.h"
#include "tools/backends.h"
#include "tools/campaign.h"
#include "tools/interrupt.h"

namespace kvcheck::cli {

namespace {

bool names_row(const std::string& problem, const rcgen::KillMatrixRow& row) {
  if (!row.fault) return problem.rfind("the correct engine", 0) == 0;
  return problem.rfind(row.name + ":", 0) == 0 || problem.rfind(row.name + " ", 0) == 0;
}

KillRecord kill_record(const std::string& backend, const rcgen::KillMatrixRow& row,
                       const std::vector<std::string>& failures,
                       const std::vector<std::string>& notes) {
  const rcgen::HuntResult* best = row.smallest();
  KillRecord k;
  k.backend = backend;
  k.fault = row.fault ? std::string(fault_name(*row.fault)) : "(correct engine)";
  k.is_fault = row.fault.has_value();
  k.ran = row.ran;
  k.killed = best != nullptr;
  k.cases_to_kill = row.any.cases_run;
  k.killed_by = best ? std::string(property_name(best->verdict.property)) : "";
  k.shrunk_size = best && best->counterexample ? best->counterexample->size() : 0;
  k.shrunk_scenario = best && best->counterexample ? best->counterexample->to_text() : "";
  for (size_t i = 0; i < row.cells.size(); ++i) {
    const rcgen::HuntResult& r = row.cells[i];
    k.cells.push_back({static_cast<Property>(i), r.failed, r.cases_run,
                       r.counterexample ? r.counterexample->size() : 0});
  }
  for (const std::string& p : failures) {
    if (names_row(p, row)) k.problems.push_back(p);
  }
  for (const std::string& n : notes) {
    if (names_row(n, row)) k.notes.push_back(n);
  }
  return k;
}

}  // namespace

rcgen::KillMatrixOptions kill_matrix_options(const Backend& backend, uint64_t seed, int cases,
                                             int shrink_steps, bool per_property) {
  rcgen::KillMatrixOptions k;
  k.seed = seed;
  k.cases_per_cell = cases;
  k.correct_cases = cases;
  k.per_property = per_property;
  k.max_shrink_steps = shrink_steps;
  k.catalogue_applies = !backend.weakened;
  return k;
}

void run_kill_matrices(Campaign& c, Progress& progress) {
  const CampaignOptions& o = c.options;
  for (size_t b = 0; b < c.backends.size() && !c.out_of_time(); ++b) {
    const Backend& backend = c.backends[b];
    // Only an engine with fault switches can show that the properties bite.
    // It runs on seeded models even with --model: it proves the harness, and
    // on one fixed checkpoint (an MHA one, say) some faults cannot show.
    if (!backend.traits.operations.fault_switches) {
      std::printf("\nkill matrix: skipped on %s (it declares no fault switches)\n",
                  backend.spec.c_str());
      continue;
    }
    // The 'any' column alone (every property per case) is the fastest kill;
    // per property shows what each one still catches on its own.
    rcgen::KillMatrixOptions k = kill_matrix_options(backend, o.kill_seed, o.kill_cases,
                                                     o.shrink_steps, o.kill_per_property);
    k.deadline = c.deadline;
    k.stop = [] { return interrupted() != 0; };
    k.worker.isolate = c.isolated(b);
    k.worker.case_timeout_seconds = o.case_timeout;
    progress.update("kill matrix on " + backend.spec, /*force=*/true);
    const rcgen::KillMatrix matrix = rcgen::run_kill_matrix(
        [&](FaultSet f) { return engine_under_test(backend, f, c.subjects[b]->reference); }, k,
        [&](const std::string& line) { progress.update(line); });
    progress.done();
    std::printf(
        "\nkill matrix on %s (seed %llu, every property per case, up to %d cases per "
        "fault):\n%s",
        backend.spec.c_str(), (unsigned long long)o.kill_seed, o.kill_cases,
        matrix.table().c_str());
    const std::vector<std::string> failures = matrix.failures();
    const std::vector<std::string> notes = matrix.shrink_notes();
    for (const std::string& p : failures) std::printf("  problem: %s\n", p.c_str());
    for (const std::string& n : notes) std::printf("  note (not failing): %s\n", n.c_str());
    for (const std::string& n : matrix.not_run()) {
      c.record.incomplete.push_back("kill matrix on " + backend.spec + ": " + n);
    }
    for (const std::string& n : notes) c.record.notes.push_back(backend.spec + ": " + n);
    for (const rcgen::KillMatrixRow& row : matrix.rows) {
      c.record.kills.push_back(kill_record(backend.spec, row, failures, notes));
    }
  }
  std::fflush(stdout);
}

}  // namespace kvcheck::cli
