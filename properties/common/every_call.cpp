// The run that asks after every call (every_call.h).
#include "properties/common/every_call.h"

#include "properties/common/verdicts.h"

namespace kvcheck::checks {

Verdict check_after_every_call(
    Property property, const Context& context,
    const std::function<std::string(int call, const ScenarioRunner&)>& problem_after,
    const std::string& rule, const std::string& passed) {
  Verdict verdict = start_verdict(property);
  const Scenario& scenario = context.scenario;
  const CallHook hook = [&](int call, const ScenarioRunner& runner) {
    const std::string problem = problem_after(call, runner);
    if (problem.empty()) return true;
    Location where;
    where.call = call;
    fail(verdict, where, "after call " + std::to_string(call) + ": " + problem, rule);
    return false;
  };
  ScenarioRunner runner(scenario, scenario.config, context.weights, context.factory);
  const RunResult run = runner.run(hook);
  if (!verdict.passed) return verdict;
  if (run.engine_failed) return engine_refused(property, run, "the scenario");
  pass(verdict, passed);
  return verdict;
}

}  // namespace kvcheck::checks
