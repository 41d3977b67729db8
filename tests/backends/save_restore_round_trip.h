// Save and restore through a transport (exec, the plugin ABI): an engine
// behind it that declares save_restore gives every property the in-tree
// verdict on a schedule that saves, changes and restores sequences (after a
// context shift, under a fork), and a restore of a sequence never saved
// comes back as the engine's refusal. Shared by the exec and the plugin
// tests, as offload is (offload_round_trip.h).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "backends/registry.h"
#include "model/weights.h"
#include "properties/scenario.h"
#include "tests/backends/in_tree_verdicts.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck::test {

inline void expect_save_restore_through(const EngineUnderTest& through) {
  ASSERT_TRUE(through.traits.operations.save_restore);
  const Scenario s = save_restore_scenario();
  expect_in_tree_verdicts_through(s, through);
  EngineOptions options;
  options.capacity = 4;
  auto engine = through.factory(s.config, init_weights(s.config, 1), options);
  const SequenceId id = engine->start();
  try {
    engine->restore_state(id);
    ADD_FAILURE() << "a restore without a save was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.kind(), EngineError::Kind::kBadBatch);
    EXPECT_NE(std::string(e.what()).find("never saved"), std::string::npos) << e.what();
  }
}

}  // namespace kvcheck::test
