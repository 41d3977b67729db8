// Every property (P1-P9) against the CUDA engine on generated scenarios, and
// P10: the CUDA engine against the CPU engine on the same scenario within
// twice the derived bound. Case counts: KVCHECK_GPU_CASES (default 100) or
// RC_PARAMS' max_success. Skips cleanly without a device.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <cstdlib>

#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/runner.h"
#include "tests/gpu/cross_engine.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/properties/rc_driver.h"

namespace kvcheck::test {
namespace {

int gpu_cases() {
  const char* value = std::getenv("KVCHECK_GPU_CASES");
  return value != nullptr ? std::atoi(value) : 100;
}

void expect_property_on_gpu(Property property) {
  KVCHECK_REQUIRE_GPU();
  const EngineFactory factory = cuda_engine_factory();
  check_scenarios(gpu_cases(), rcgen::emphasis_for(property), [&](const Scenario& s) {
    RC_ASSERT(s.validate() == "");
    classify(s);
    const Verdict v = check_property(property, s, factory);
    RC_CLASSIFY(!v.applicable, "not applicable");
    if (!v.passed) RC_FAIL(v.summary + "\n" + v.detail);
  });
}

TEST(GpuProperties, P1Oracle) {
  expect_property_on_gpu(Property::kOracle);
}
TEST(GpuProperties, P2Chunking) {
  expect_property_on_gpu(Property::kChunking);
}
TEST(GpuProperties, P3Batch) {
  expect_property_on_gpu(Property::kBatch);
}
TEST(GpuProperties, P4Reset) {
  expect_property_on_gpu(Property::kReset);
}
TEST(GpuProperties, P5Compaction) {
  expect_property_on_gpu(Property::kCompaction);
}
TEST(GpuProperties, P6CacheState) {
  expect_property_on_gpu(Property::kCacheState);
}
TEST(GpuProperties, P7Gqa) {
  expect_property_on_gpu(Property::kGqa);
}
TEST(GpuProperties, P8Determinism) {
  expect_property_on_gpu(Property::kDeterminism);
}
TEST(GpuProperties, P9Capacity) {
  expect_property_on_gpu(Property::kCapacity);
}

TEST(GpuProperties, P10CudaMatchesCpuWithinTwiceTheBound) {
  KVCHECK_REQUIRE_GPU();
  const EngineFactory gpu = cuda_engine_factory();
  const EngineFactory cpu = cpu_engine_factory();
  check_scenarios(gpu_cases(), rcgen::Emphasis::kAny, [&](const Scenario& s) {
    classify(s);
    const Verdict v = check_cross_engine(s, gpu, cpu);
    if (!v.passed) RC_FAIL(v.summary);
  });
}

TEST(GpuProperties, P10FlagsAFaultyEngine) {
  // P10 must be able to fail: a CUDA engine with swapped K and V against the
  // correct CPU engine, on a scenario where the swap shows.
  KVCHECK_REQUIRE_GPU();
  Scenario s;
  s.config = gpt2_tiny();
  s.config.n_layers = 1;
  s.capacity = 8;
  s.max_rows = 1;
  s.sequences = {{1, 2, 3}};
  s.calls = {Call::start(0), Call::step({{0, 2}}), Call::step({{0, 1}})};
  ASSERT_EQ(s.validate(), "");
  EXPECT_TRUE(check_cross_engine(s, cuda_engine_factory(), cpu_engine_factory()).passed);
  EXPECT_FALSE(
      check_cross_engine(s, cuda_engine_factory(FaultSet(Fault::kKvSwapped)), cpu_engine_factory())
          .passed);
}

}  // namespace
}  // namespace kvcheck::test
