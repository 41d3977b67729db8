// Every fault that lives in an operation of docs/OPERATIONS.md (fork,
// truncate, paged storage, the storage check, the q8_0 dtype, the prefix
// cache, sliding windows, erase and shift), switched on inside an engine
// behind a transport that carries no fault switches (kvcheck-serve --fault,
// the test plugin's fault= option): on the fault's minimal scenario every
// property must give the in-tree verdict through the transport, at least
// one must fail, and the clean engine must pass the same scenario. Shared
// by the exec and the plugin tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

#include "backends/registry.h"
#include "engine/traits.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {

inline void expect_operation_faults_caught(
    const std::function<EngineUnderTest(const std::string& fault)>& through,
    const EngineUnderTest& clean) {
  int faults = 0;
  for (int i = 0; i < kFaultCount; ++i) {
    const Fault f = Fault(i);
    // The core faults need no operation; the rest need what they live in,
    // which both transports carry (the prefix cache, windows and context
    // shifts too: their snapshots' positions cross both).
    if (fault_needs(f).empty() || !declares(clean.traits, fault_needs(f))) continue;
    ++faults;
    const std::string name(fault_name(f));
    const EngineUnderTest faulty = through(name);
    const EngineUnderTest in_tree = backend_registry().resolve("cpu").under_test(FaultSet(f));
    const Scenario s = minimal_fault_scenario(f);
    int failed = 0;
    for (int p = 0; p < kPropertyCount; ++p) {
      const Verdict a = check_property(Property(p), s, faulty);
      const Verdict b = check_property(Property(p), s, in_tree);
      EXPECT_EQ(a.passed, b.passed)
          << name << " " << property_name(Property(p)) << ": " << a.summary << " vs " << b.summary;
      // The transports widen a q8_0 snapshot to f32 without its scales, so P6
      // bounds each element by the largest correct scale instead of the stored
      // one and may name another slot first: the verdict must agree, the text
      // need not.
      // Not applicable may be for different reasons (the transport lacks the
      // prefix cache, the scenario has none): the applicability must agree.
      EXPECT_EQ(a.applicable, b.applicable) << name << " " << property_name(Property(p));
      if (fault_needs(f) != "q8_0" && a.applicable && b.applicable) {
        EXPECT_EQ(a.summary, b.summary) << name << " " << property_name(Property(p));
      }
      failed += a.applicable && !a.passed;
      const Verdict c = check_property(Property(p), s, clean);
      EXPECT_TRUE(c.passed) << name << " clean " << property_name(Property(p)) << ": " << c.summary;
    }
    EXPECT_GT(failed, 0) << name << " survived every property through the transport";
  }
  EXPECT_GE(faults, 20);  // 17 before the window faults joined
  std::printf("operation faults checked through the transport: %d\n", faults);
}

}  // namespace kvcheck::test
