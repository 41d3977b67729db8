// The registry: unknown names list what is registered; malformed or unknown
// options are InputErrors naming the option; the generic weakenings lower
// exactly what they say.
#include <gtest/gtest.h>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "engine/arithmetic_presets.h"
#include "engine/traits_json.h"
#include "tests/backends/resolve_error.h"

namespace kvcheck {
namespace {

using test::resolve_error;

TEST(Registry, AnUnknownBackendListsTheRegisteredOnes) {
  EXPECT_EQ(resolve_error("gpu"),
            "--backend: unknown backend \"gpu\" (registered: " + backend_registry().names() + ")");
  EXPECT_EQ(backend_registry().names().rfind("cpu, cpu-reference, ", 0), 0u)
      << backend_registry().names();
  EXPECT_NE(backend_registry().names().find("plugin:PATH"), std::string::npos);
}

TEST(Registry, BadOptionsAreInputErrorsNamingThem) {
  EXPECT_EQ(resolve_error("cpu?colour=red"),
            "--backend cpu: unknown option \"colour\" (known: paged, pool, prefix; every backend "
            "also takes invariance=bounded, profile=restricted, arithmetic=NAME and "
            "kv_dtypes=T,...)");
  EXPECT_EQ(resolve_error("cpu?arithmetic=f8"),
            "--backend cpu: arithmetic=f8 (known: " + arithmetic_preset_names() + ")");
  EXPECT_EQ(resolve_error("cpu?paged=33"),
            "--backend cpu?paged=33: expected an integer in [1, 32]");
  EXPECT_EQ(resolve_error("cpu?pool=8"),
            "--backend cpu?pool=8: a pool needs paged=B (block size 1..32)");
  EXPECT_EQ(resolve_error("cpu?prefix=1"),
            "--backend cpu?prefix=1: a prefix cache needs paged=B (block size 1..32)");
  EXPECT_EQ(resolve_error("cpu?paged=4&prefix=2"),
            "--backend cpu?prefix=2: expected an integer in [0, 1]");
  EXPECT_EQ(resolve_error("cpu?invariance=sometimes"),
            "--backend cpu: invariance=sometimes (only invariance=bounded weakens a declaration)");
  EXPECT_EQ(resolve_error("cpu?profile=fast"),
            "--backend cpu: profile=fast (the only profile is \"restricted\")");
  EXPECT_EQ(resolve_error("cpu?kv_dtypes=f16,q5_1"),
            "--backend cpu: kv_dtypes=f16,q5_1: \"q5_1\" is not a cache type this engine "
            "declares (f32, bf16, f16, q8_0)");
  EXPECT_EQ(resolve_error("cpu?x"), "--backend cpu?x: option \"x\" is not of the form key=value");
  EXPECT_EQ(resolve_error("?invariance=bounded"),
            "--backend: empty backend name in \"?invariance=bounded\"");
}

TEST(Registry, WeakeningsLowerOnlyWhatTheySay) {
  const Backend plain = backend_registry().resolve("cpu");
  EXPECT_EQ(traits_to_json(plain.traits), traits_to_json(cpu_engine_traits_with_operations()));
  EXPECT_FALSE(plain.weakened);

  const Backend bounded = backend_registry().resolve("cpu?invariance=bounded");
  EXPECT_TRUE(bounded.weakened);
  EXPECT_EQ(bounded.spec, "cpu?invariance=bounded");
  EngineTraits expected = cpu_engine_traits_with_operations();
  expected.invariance = {Invariance::kBounded, Invariance::kBounded, Invariance::kBounded,
                         Invariance::kBounded, Invariance::kBounded, Invariance::kBounded,
                         Invariance::kBounded, Invariance::kBounded};
  EXPECT_EQ(traits_to_json(bounded.traits), traits_to_json(expected));

  const Backend restricted = backend_registry().resolve("cpu-reference?profile=restricted");
  expected = cpu_engine_traits_with_operations(KernelPath::kReference);
  expected.operations.cache_snapshot = false;
  expected.operations.capacity_refusal = false;
  expected.limits.capacity_shared = true;
  EXPECT_EQ(traits_to_json(restricted.traits), traits_to_json(expected));

  const Backend narrowed = backend_registry().resolve("cpu?kv_dtypes=q8_0,f32,f32");
  EXPECT_TRUE(narrowed.weakened);
  expected = cpu_engine_traits_with_operations();
  expected.limits.kv_dtypes = {KvDtype::kQ8_0, KvDtype::kF32};
  EXPECT_EQ(traits_to_json(narrowed.traits), traits_to_json(expected));
}

}  // namespace
}  // namespace kvcheck
