// The second memory tier through a transport (exec, the plugin ABI): an
// engine behind it that declares offload moves a sequence's blocks to its
// host tier, reports both tiers in its pool reply, and a schedule with
// offloads gives every property the in-tree verdict. Shared by the exec and
// the plugin tests, as the abort and cache-key operations are checked
// through operation_faults.h.
#pragma once

#include <gtest/gtest.h>

#include "backends/registry.h"
#include "model/config.h"
#include "model/weights.h"
#include "properties/property.h"
#include "properties/scenario.h"
#include "tests/backends/in_tree_verdicts.h"

namespace kvcheck::test {

// Two prompts in blocks of 2, one forked; offloads of a sequence with a
// shared block, of its child, and steps that bring them back.
inline Scenario offload_scenario() {
  Scenario s;
  s.config = llama_tiny();
  s.capacity = 12;
  s.max_rows = 3;
  s.block_size = 2;
  s.sequences = {{1, 2, 3, 4, 5, 6}, {7, 8, 9}, {10, 11}};
  s.calls = {Call::start(0),       Call::start(1),      Call::step({{0, 3}, {1, 2}}),
             Call::offload(0),     Call::fork(2, 0, 3), Call::offload(2),
             Call::step({{0, 2}}), Call::offload(1),    Call::step({{1, 1}, {2, 2}}),
             Call::finish(1),      Call::step({{0, 1}})};
  return s;
}

inline void expect_offload_through(const EngineUnderTest& through) {
  ASSERT_TRUE(through.traits.operations.offload);
  const Scenario s = offload_scenario();
  ASSERT_EQ("", s.validate());
  expect_in_tree_verdicts_through(s, through);
  // The pool reply carries the host tier: the offloaded sequence's blocks
  // are counted there.
  EngineOptions options = s.engine_options();
  auto engine = through.factory(s.config, init_weights(s.config, 1), options);
  const SequenceId id = engine->start();
  const std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<float> logits;
  engine->step(std::vector<BatchEntry>{{id, tokens}}, logits);
  engine->offload(id);
  const PoolReport r = engine->pool();
  EXPECT_EQ(r.host_total, options.host_blocks);
  EXPECT_EQ(r.host_used, 2);
  EXPECT_EQ(r.used, 0);
  EXPECT_EQ(r.host_free + r.host_used + r.host_cached, r.host_total);
}

}  // namespace kvcheck::test
