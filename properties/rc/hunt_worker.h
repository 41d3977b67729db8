// Hunts in a worker process, so that an engine that crashes, aborts or hangs
// ends one case with a verdict, never the run that checks it (libFuzzer's
// -fork mode, kept warm: one worker serves hunt after hunt).
//
// The worker is forked from the caller, so it holds everything the caller
// set up; a job is a short text the caller gives meaning to (which property,
// which seed), and the worker turns it into a hunt with the same `spec_for`
// the caller would use. Each evaluation's description streams back as it
// happens. When the worker dies or stalls, the caller knows which evaluation
// killed it; it replays the hunt itself up to there from what the worker
// reported, then runs that case and every later one (the shrink included)
// in a fresh process each, so the crash shrinks like any failure.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "properties/rc/hunt.h"

namespace kvcheck::rcgen {

struct HuntSpec {
  std::shared_ptr<const EngineUnderTest> subject;
  // The property checked; none: every property per case (check_all). A crash
  // is charged to this one, or to the first that fails or crashes alone.
  std::optional<Property> property;
  Emphasis emphasis = Emphasis::kAny;
  HuntOptions options;
  // Runs next to each check, where the check runs: what the caller hears of
  // the evaluation. It must not run the engine (it also describes a crash,
  // in the caller). Empty: nothing is described.
  std::function<std::string(const Scenario&, const Verdict&)> describe;

  Verdict check(const Scenario& scenario) const;
};

struct WorkerOptions {
  // false: hunts run in the caller's process (engines that live in another
  // process already, or that cannot be forked: a CUDA context).
  bool isolate = true;
  // An evaluation that takes longer is a hang: the engine's verdict. Far above
  // any case of a correct engine, so that no machine's load reaches it.
  double case_timeout_seconds = 120;
  // Polled while waiting: true ends the job (an interrupted run), the worker
  // is killed and the result is marked cut.
  std::function<bool()> stop;
};

// Hunts in the caller's process.
inline WorkerOptions in_process() {
  WorkerOptions o;
  o.isolate = false;
  return o;
}

// Hears each evaluation: its description and whether it was a shrink step
// (a candidate after the first failure) rather than a generated case.
using EvaluationListener = std::function<void(const std::string& description, bool shrinking)>;

class WorkerProcess;

class HuntWorker {
 public:
  using SpecFor = std::function<HuntSpec(const std::string& job)>;
  HuntWorker(SpecFor spec_for, WorkerOptions options);
  ~HuntWorker();
  HuntWorker(const HuntWorker&) = delete;
  HuntWorker& operator=(const HuntWorker&) = delete;

  // Runs the job's hunt; `listener` hears every evaluation in order.
  HuntResult run(const std::string& job, const EvaluationListener& listener);

  int deaths() const { return deaths_; }  // workers lost to a crash or hang

 private:
  HuntResult run_in_worker(const std::string& job, const EvaluationListener& listener);
  HuntResult recover(const std::string& job, const std::vector<bool>& passed_before,
                     const std::string& death, const EvaluationListener& listener);

  SpecFor spec_for_;
  WorkerOptions options_;
  std::unique_ptr<WorkerProcess> process_;  // the warm worker; null until a job or after a death
  int deaths_ = 0;
};

// The spec's check of one scenario in a fresh process: its verdict, or a
// failing one that says how the engine crashed or hung (charged as in
// HuntSpec). Replay runs a case so, to give a crash's verdict again.
Verdict check_in_fresh_process(const HuntSpec& spec, const Scenario& scenario,
                               const WorkerOptions& options);

}  // namespace kvcheck::rcgen
