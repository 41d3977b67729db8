// Every property through a transport (exec, the plugin ABI) must give the
// in-tree CPU engine's verdict on one scenario, and hold: the check the
// operation round trips (offload_round_trip.h, save_restore_round_trip.h)
// share.
#pragma once

#include <gtest/gtest.h>

#include "backends/registry.h"
#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck::test {

inline void expect_in_tree_verdicts_through(const Scenario& s, const EngineUnderTest& through) {
  const EngineUnderTest in_tree = backend_registry().resolve("cpu").under_test();
  for (int p = 0; p < kPropertyCount; ++p) {
    const Verdict a = check_property(Property(p), s, through);
    const Verdict b = check_property(Property(p), s, in_tree);
    EXPECT_EQ(a.applicable, b.applicable) << property_name(Property(p));
    EXPECT_TRUE(a.passed) << property_name(Property(p)) << ": " << a.summary;
    EXPECT_EQ(a.summary, b.summary) << property_name(Property(p));
  }
}

}  // namespace kvcheck::test
