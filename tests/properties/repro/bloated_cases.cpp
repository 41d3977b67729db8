#include "tests/properties/repro/bloated_cases.h"

#include <rapidcheck.h>

#include "backends/in_tree.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/rc/kill_matrix.h"
#include "properties/runner.h"

namespace kvcheck::test {

std::optional<CaseFile> bloated_case(const FaultTarget& target, int min_size, uint64_t seed,
                                     int tries) {
  const FaultSet faults(target.fault);
  const EngineUnderTest factory(cpu_engine_factory(faults), cpu_engine_traits_with_operations());
  // The property's emphasis first; where it draws no failing case (the
  // default draws few saves and restores), the fault's kill-row emphasis.
  const rcgen::Emphasis emphases[] = {rcgen::emphasis_for(target.property),
                                      rcgen::emphasis_for_fault(target.fault)};
  constexpr int kFullSize = 100;
  for (int i = 0; i < 2 * tries; ++i) {
    const rc::Gen<Scenario> scenarios = rcgen::scenario(emphases[i / tries], factory.traits);
    const Scenario s = scenarios(rc::Random(seed + uint64_t(i % tries)), kFullSize).value();
    if (s.size() < min_size) continue;
    const Verdict v = check_property(target.property, s, factory);
    if (v.passed) continue;
    CaseFile c;
    c.scenario = s;
    c.property = target.property;
    c.faults = faults;
    c.backend = "cpu";
    c.notes.push_back("bloated starting case for " + std::string(fault_name(target.fault)) +
                      " (generated, seed " + std::to_string(seed + uint64_t(i % tries)) +
                      (i >= tries ? ", the fault's emphasis)" : ")"));
    c.has_verdict = true;
    c.verdict = record_verdict(v);
    return c;
  }
  return std::nullopt;
}

}  // namespace kvcheck::test
