// Hunts in a worker process (properties/rc/hunt_worker.h): an engine that
// segfaults, aborts or hangs fails the property with a shrunk case while the
// caller goes on; a correct engine's hunt gives the same result in the
// worker as in the caller, and the worker stays warm across jobs.
#include "properties/rc/hunt_worker.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "backends/in_tree.h"
#include "tests/backends/wrapped_engine.h"

namespace kvcheck::rcgen {
namespace {

// The ways an engine can take its process down, on every finish.
enum class Death { kSegfault, kAbort, kHang };

template <Death kDeath>
class DiesOnFinish final : public test::WrappedEngine {
 public:
  using WrappedEngine::WrappedEngine;
  void finish(SequenceId sequence) override {
    if constexpr (kDeath == Death::kSegfault) raise(SIGSEGV);
    if constexpr (kDeath == Death::kAbort) std::abort();
    if constexpr (kDeath == Death::kHang) {
      for (;;) pause();
    }
    inner_->finish(sequence);
  }
};

template <Death kDeath>
std::shared_ptr<const EngineUnderTest> dies_on_finish() {
  return std::make_shared<const EngineUnderTest>(
      test::wrapping<DiesOnFinish<kDeath>>(cpu_engine_factory()), cpu_engine_traits());
}

HuntWorker::SpecFor compaction_on(std::shared_ptr<const EngineUnderTest> subject,
                                  int shrink_steps = 400) {
  return [subject, shrink_steps](const std::string& job) {
    HuntSpec spec;
    spec.subject = subject;
    spec.property = Property::kCompaction;
    spec.options.traits = subject->traits;
    spec.options.seed = std::stoull(job);
    spec.options.max_cases = 100;
    spec.options.max_shrink_steps = shrink_steps;
    spec.describe = [](const Scenario& s, const Verdict& v) {
      return std::to_string(s.size()) + (v.passed ? " passed" : " failed");
    };
    return spec;
  };
}

bool has_finish(const Scenario& s) {
  for (const Call& c : s.calls) {
    if (c.kind == Call::Kind::kFinish) return true;
  }
  return false;
}

void expect_a_crash_is_a_shrunk_failure(std::shared_ptr<const EngineUnderTest> subject,
                                        const std::string& how, double timeout = 120,
                                        int shrink_steps = 400) {
  WorkerOptions options;
  options.case_timeout_seconds = timeout;
  HuntWorker worker(compaction_on(subject, shrink_steps), options);
  int heard = 0;
  const HuntResult r = worker.run("7", [&](const std::string&, bool) { ++heard; });
  ASSERT_TRUE(r.failed) << "no failure in " << r.cases_run << " cases";
  EXPECT_EQ(worker.deaths(), 1);
  EXPECT_EQ(r.verdict.property, Property::kCompaction);
  EXPECT_NE(r.verdict.summary.find("the engine crashed"), std::string::npos) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find(how), std::string::npos) << r.verdict.summary;
  ASSERT_TRUE(r.counterexample.has_value());
  EXPECT_TRUE(has_finish(*r.counterexample)) << r.counterexample->to_text();
  EXPECT_GT(r.shrink_steps, 0) << "the crash was not shrunk";
  EXPECT_EQ(heard, r.evaluations) << "every evaluation is heard once";
  // The crashing case, checked alone in a fresh process, crashes again.
  HuntSpec spec = compaction_on(subject, shrink_steps)("7");
  const Verdict again = check_in_fresh_process(spec, *r.counterexample, options);
  EXPECT_FALSE(again.passed);
  EXPECT_EQ(again.summary, r.verdict.summary);
}

TEST(HuntWorker, ASegfaultIsAShrunkFailureNotTheEndOfTheRun) {
  // ASan reports the signal and exits 1 itself: "killed by signal" or that.
  expect_a_crash_is_a_shrunk_failure(dies_on_finish<Death::kSegfault>(), "the process that ran it");
}

TEST(HuntWorker, AnAbortIsAShrunkFailure) {
  expect_a_crash_is_a_shrunk_failure(dies_on_finish<Death::kAbort>(), "the process that ran it");
}

TEST(HuntWorker, AHangIsAShrunkFailureAfterTheCaseTimeout) {
  // Each hanging candidate costs the timeout: a short one, and few steps.
  expect_a_crash_is_a_shrunk_failure(dies_on_finish<Death::kHang>(),
                                     "did not finish the case within 0.2 s", 0.2, 20);
}

TEST(HuntWorker, ACorrectEnginesHuntIsTheSameInTheWorkerAndWarmAcrossJobs) {
  const auto subject =
      std::make_shared<const EngineUnderTest>(cpu_engine_factory(), cpu_engine_traits());
  std::vector<std::string> in_worker, in_caller;
  HuntWorker worker(compaction_on(subject), WorkerOptions{});
  HuntWorker caller(compaction_on(subject), in_process());
  for (const char* seed : {"1", "2"}) {
    const HuntResult a =
        worker.run(seed, [&](const std::string& d, bool) { in_worker.push_back(d); });
    const HuntResult b =
        caller.run(seed, [&](const std::string& d, bool) { in_caller.push_back(d); });
    EXPECT_FALSE(a.failed) << a.verdict.summary;
    EXPECT_EQ(a.cases_run, b.cases_run);
    EXPECT_EQ(a.evaluations, b.evaluations);
    EXPECT_FALSE(a.cut);
  }
  EXPECT_EQ(in_worker, in_caller);
  EXPECT_EQ(in_worker.size(), 200u);
  EXPECT_EQ(worker.deaths(), 0);
}

TEST(HuntWorker, AStopEndsTheJobAsCut) {
  const auto subject = dies_on_finish<Death::kHang>();
  WorkerOptions options;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  options.stop = [&] { return std::chrono::steady_clock::now() >= until; };
  HuntWorker worker(compaction_on(subject), options);
  const HuntResult r = worker.run("7", {});
  EXPECT_TRUE(r.cut);
  EXPECT_FALSE(r.failed);
}

}  // namespace
}  // namespace kvcheck::rcgen
