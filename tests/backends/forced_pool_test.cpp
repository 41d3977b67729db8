// A pool the backend sizes (cpu?paged=B&pool=N) and the scenario does not
// name: its refusals are data, as for a scenario's own pool_blocks
// (docs/OPERATIONS.md, "Small pools"). Found by a 25 s campaign on
// cpu?paged=1&prefix=1&pool=6: P3's run behind a dummy sequence ran the six
// blocks dry, the refusal changed nothing, and P3 compared its cut-off
// logits, failing the correct engine.
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "properties/property.h"
#include "properties/repro/case_file.h"

namespace kvcheck {
namespace {

constexpr const char* kShrunkCase = R"(kvcheck-case 1
property batch
backend cpu?paged=1&prefix=1&pool=6
family gpt2
n_layers 1
d_model 1
n_heads 1
n_kv_heads 1
head_dim 1
d_ff 1
vocab 1
max_pos 5
rope_theta 10000
norm_eps 1e-05
qkv_bias false
weight_seed 0
capacity 5
max_rows 2
kv_dtype f32
sequence s0: 0 0 0 0 0
start s0
step s0:1
step s0:4
)";

TEST(ForcedPool, ARefusalInARunBehindDummiesIsDataNotAFailure) {
  const Result<CaseFile> parsed = parse_case(kShrunkCase);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const Backend forced = backend_registry().resolve(parsed.value().backend);
  ASSERT_TRUE(forced.forces_pool);
  const Verdict v = check_property(Property::kBatch, parsed.value().scenario, forced.under_test());
  EXPECT_TRUE(v.passed) << v.summary;
  // Its one re-placed run is the one that ran dry: nothing is left to compare.
  EXPECT_FALSE(v.applicable) << v.summary;
  EXPECT_NE(v.summary.find("ran the pool dry"), std::string::npos) << v.summary;

  // Without the backend's pool the same scenario is checked, and holds.
  const Verdict plain = check_property(Property::kBatch, parsed.value().scenario,
                                       backend_registry().resolve("cpu").under_test());
  EXPECT_TRUE(plain.applicable && plain.passed) << plain.summary;
}

TEST(ForcedPool, CapacityIsNotApplicableWithAPoolTheBackendSizes) {
  const Result<CaseFile> parsed = parse_case(kShrunkCase);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const Verdict v = check_property(Property::kCapacity, parsed.value().scenario,
                                   backend_registry().resolve(parsed.value().backend).under_test());
  EXPECT_FALSE(v.applicable) << v.summary;
  EXPECT_NE(v.summary.find("a backend option"), std::string::npos) << v.summary;
}

}  // namespace
}  // namespace kvcheck
