#include "tools/fresh_child.h"

#include "backends/exec/exec.h"
#include "backends/registry.h"

namespace kvcheck::cli {

bool serves_many_cases(const EngineUnderTest& subject) {
  return exec_child_generation(subject.factory).has_value();
}

EngineUnderTest fresh_process(const EngineUnderTest& subject) {
  EngineUnderTest fresh = subject;
  // An exec: backend has no fault switches.
  if (serves_many_cases(subject))
    fresh.factory = backend_registry().resolve(subject.backend).make_factory({});
  return fresh;
}

std::vector<Verdict> run_prelude(const EngineUnderTest& fresh, std::span<const PreludeCase> prelude,
                                 const Scenario& scenario) {
  std::vector<Verdict> verdicts;
  for (const PreludeCase& p : prelude) {
    Scenario earlier = p.scenario;
    if (scenario.model) earlier.model = scenario.model;
    verdicts.push_back(check_property(p.property, earlier, fresh));
  }
  return verdicts;
}

PreludeRun check_after_prelude(const EngineUnderTest& subject, std::span<const PreludeCase> prelude,
                               Property property, const Scenario& scenario) {
  const EngineUnderTest fresh = fresh_process(subject);
  PreludeRun run;
  run.prelude = run_prelude(fresh, prelude, scenario);
  run.verdict = check_property(property, scenario, fresh);
  return run;
}

}  // namespace kvcheck::cli
