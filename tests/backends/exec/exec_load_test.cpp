// A child that refuses to load a model: the case that needed the model fails
// with the engine's own message, and the model is never taken as loaded, so
// the next case on it loads it again instead of failing as "unknown model".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/registry.h"
#include "model/weights.h"
#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck {
namespace {

Scenario one_sequence() {
  Scenario s;
  s.config = gpt2_tiny();
  s.weight_seed = 11;
  s.capacity = 4;
  s.max_rows = 1;
  s.sequences = {{1, 2, 3}};
  s.calls = {Call::start(0), Call::step({{0, 2}}), Call::step({{0, 1}})};
  return s;
}

// kvcheck-serve (`serve_flags` after it) behind a proxy that refuses the
// second load it sees: the first case's (the resolve probe sends the first).
EngineUnderTest refusing_second_load(const std::string& serve_flags) {
  return backend_registry()
      .resolve(std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
               "/tests/tools/faulty_proxy.py --fault refuse_load --at 2 -- " + KVCHECK_SERVE +
               serve_flags)
      .under_test();
}

TEST(ExecFaults, ARefusedLoadFailsItsCaseWithTheEnginesMessageAndIsNotKept) {
  const Scenario s = one_sequence();
  ASSERT_EQ(s.validate(), "");
  // Protocol 2 sends the load without waiting, protocol 1 waits for it.
  for (const std::string flags : {"", " --protocol 1"}) {
    SCOPED_TRACE("kvcheck-serve" + flags);
    const EngineUnderTest subject = refusing_second_load(flags);
    const Verdict refused = check_property(Property::kOracle, s, subject);
    EXPECT_FALSE(refused.passed);
    const std::string text = refused.summary + "\n" + refused.detail;
    EXPECT_NE(text.find("faulty_proxy cannot read"), std::string::npos) << text;
    EXPECT_EQ(text.find("unknown model"), std::string::npos) << text;
    // The same model again: loaded anew, and the child serves it.
    for (int again = 0; again < 2; ++again) {
      const Verdict next = check_property(Property::kOracle, s, subject);
      EXPECT_TRUE(next.passed && next.applicable) << next.summary << "\n" << next.detail;
    }
  }
}

// Protocol 2: an engine made and dropped before any reply was read leaves its
// load's refusal unread; the next engine on the model reads it before taking
// the model as loaded.
TEST(ExecFaults, ALoadRefusedUnreadIsReadBeforeTheModelIsReused) {
  const Scenario s = one_sequence();
  const EngineFactory factory = refusing_second_load("").factory;
  const Weights weights = init_weights(s.config, s.weight_seed);
  EngineOptions options;
  options.capacity = s.capacity;
  factory(s.config, weights, options).reset();  // load and create sent, nothing read
  auto engine = factory(s.config, weights, options);
  const SequenceId id = engine->start();
  std::vector<float> logits;
  EXPECT_NO_THROW(engine->step(std::vector<BatchEntry>{{id, s.sequences[0]}}, logits));
  EXPECT_EQ(engine->length(id), 3);
}

}  // namespace
}  // namespace kvcheck
