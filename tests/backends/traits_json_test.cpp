// Traits JSON: a round trip keeps every field, and each malformed input gets
// the exact message naming the key path.
#include <gtest/gtest.h>

#include "backends/in_tree.h"
#include "engine/traits_json.h"

namespace kvcheck {
namespace {

TEST(TraitsJson, RoundTripKeepsEveryField) {
  EngineTraits t;
  t.identity = {"my-engine", "2.1"};
  t.operations.reset = false;
  t.operations.fault_switches = true;
  t.limits.families = {Family::kLlama};
  t.limits.kv_dtypes = {KvDtype::kBF16, KvDtype::kF16};
  t.limits.min_head_dim = 32;
  t.limits.max_head_dim = 256;
  t.limits.head_dim_multiple = 32;
  t.limits.capacity_shared = true;
  t.limits.max_step_tokens = 512;
  t.limits.mha_only = true;
  t.limits.d_ff_is_4x_d_model = {Family::kGpt2};
  t.invariance.batch = Invariance::kBounded;
  t.invariance.determinism = Invariance::kBounded;
  t.limits.head_dims = {64, 80, 96, 128};
  t.arithmetic.rope_angles_in_float = true;
  t.arithmetic.k_blocks_in_pair_order = true;
  t.arithmetic.v_dtype = KvDtype::kF16;
  const nlohmann::json json = traits_to_json(t);
  const Result<EngineTraits> back = traits_from_json(json);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(traits_to_json(back.value()), json);
  EXPECT_EQ(json["limits"]["kv_dtypes"], nlohmann::json({"bf16", "f16"}));
  EXPECT_EQ(json["invariance"]["batch"], "bounded");
  EXPECT_EQ(back.value().limits.head_dim_multiple, 32);
  EXPECT_TRUE(back.value().limits.mha_only);
  EXPECT_EQ(json["limits"]["d_ff_is_4x_d_model"], nlohmann::json({"gpt2"}));
  EXPECT_EQ(json["limits"]["positions"], nlohmann::json({"rope"}));  // from the families
  EXPECT_FALSE(back.value().operations.reset);
  EXPECT_EQ(json["limits"]["head_dims"], nlohmann::json({64, 80, 96, 128}));
  EXPECT_EQ(back.value().limits.head_dims, (std::vector<int>{64, 80, 96, 128}));
  EXPECT_EQ(json["arithmetic"]["v_dtype"], "f16");
  EXPECT_EQ(back.value().arithmetic.v_dtype, KvDtype::kF16);

  const Result<EngineTraits> cpu = traits_from_json(traits_to_json(cpu_engine_traits()));
  ASSERT_TRUE(cpu.ok()) << cpu.error();
  EXPECT_EQ(traits_to_json(cpu.value()), traits_to_json(cpu_engine_traits()));
}

TEST(TraitsJson, OnlyTheNameIsRequired) {
  const Result<EngineTraits> t = traits_from_json_text(R"({"identity": {"name": "x"}})");
  ASSERT_TRUE(t.ok()) << t.error();
  EngineTraits strict;
  strict.identity.name = "x";
  EXPECT_EQ(traits_to_json(t.value()), traits_to_json(strict));
}

struct Malformed {
  const char* json;
  const char* message;
};

class TraitsJsonErrors : public testing::TestWithParam<Malformed> {};

TEST_P(TraitsJsonErrors, NameTheKeyPath) {
  const Result<EngineTraits> t = traits_from_json_text(GetParam().json);
  ASSERT_FALSE(t.ok()) << GetParam().json;
  EXPECT_EQ(t.error(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, TraitsJsonErrors,
    testing::Values(
        Malformed{R"({"identity": {"name": "x"}, "colour": 1})", "traits.colour: unknown key"},
        Malformed{R"({"identity": {"name": "x"}, "operations": {"rewind": true}})",
                  "traits.operations.rewind: unknown key"},
        Malformed{R"({"identity": {"name": "x"}, "operations": {"reset": "yes"}})",
                  "traits.operations.reset: expected a boolean, got \"yes\""},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"max_rows": -1}})",
                  "traits.limits.max_rows: expected a positive integer, got -1"},
        Malformed{R"({"identity": {"version": "1"}})", "traits.identity.name: missing"},
        Malformed{R"({"operations": {}})", "traits.identity: missing"},
        Malformed{R"({"identity": {"name": ""}})",
                  "traits.identity.name: expected a non-empty string, got \"\""},
        Malformed{R"({"identity": {"name": "x"}, "invariance": {"batch": "sometimes"}})",
                  "traits.invariance.batch: expected \"bitwise\" or \"bounded\", got "
                  "\"sometimes\""},
        Malformed{R"({"identity": {"name": "x"}, "arithmetic": {"accumulation": "f8"}})",
                  "traits.arithmetic.accumulation: expected \"f32\", \"f16\" or \"bf16\", got "
                  "\"f8\""},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"head_dim_multiple": 32,
                      "max_head_dim": 16}})",
                  "traits.limits.head_dim_multiple: no multiple of 32 lies in [1, 16]"},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"positions": ["alibi"]}})",
                  "traits.limits.positions: expected \"learned\" or \"rope\" in an array, got "
                  "[\"alibi\"]"},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"mha_only": 1}})",
                  "traits.limits.mha_only: expected a boolean, got 1"},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"families": ["llama"],
                      "positions": ["learned"]}})",
                  "traits.limits.families: empty (the engine accepts no model)"},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"head_dims": [64, 0]}})",
                  "traits.limits.head_dims: expected an array of positive integers, got [64,0]"},
        Malformed{R"({"identity": {"name": "x"}, "limits": {"head_dims": 64}})",
                  "traits.limits.head_dims: expected an array of positive integers, got 64"},
        Malformed{R"({"identity": {"name": "x"}, "arithmetic": {"v_dtype": 16}})",
                  "traits.arithmetic.v_dtype: expected null or one of f32, bf16, f16, q8_0, "
                  "q4_0, q5_0 or q5_1, got 16"},
        Malformed{R"([1, 2])", "traits: expected a JSON object, got [1,2]"}));

// V stored as K unless declared: no key written, and null reads as unset.
TEST(TraitsJson, VDtypeIsOptional) {
  EXPECT_FALSE(traits_to_json(EngineTraits::strict())["arithmetic"].contains("v_dtype"));
  const Result<EngineTraits> t =
      traits_from_json_text(R"({"identity": {"name": "x"}, "arithmetic": {"v_dtype": null}})");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_FALSE(t.value().arithmetic.v_dtype.has_value());
  const Result<EngineTraits> bad =
      traits_from_json_text(R"({"identity": {"name": "x"}, "arithmetic": {"v_dtype": "q9"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().rfind("traits.arithmetic.v_dtype: ", 0), 0u) << bad.error();
}

// "positions" names the families by their positions and narrows them.
TEST(TraitsJson, PositionsNarrowTheFamilies) {
  for (const auto& [positions, family] :
       {std::pair{"learned", Family::kGpt2}, std::pair{"rope", Family::kLlama}}) {
    const Result<EngineTraits> t = traits_from_json_text(
        std::string(R"({"identity": {"name": "x"}, "limits": {"positions": [")") + positions +
        R"("]}})");
    ASSERT_TRUE(t.ok()) << t.error();
    EXPECT_EQ(t.value().limits.families, std::vector<Family>{family});
  }
}

TEST(TraitsJson, BadEnumStringInAListNamesTheList) {
  const Result<EngineTraits> t =
      traits_from_json_text(R"({"identity": {"name": "x"}, "limits": {"families": ["gpt3"]}})");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().rfind("traits.limits.families: ", 0), 0u) << t.error();
  EXPECT_NE(t.error().find("gpt3"), std::string::npos) << t.error();
}

}  // namespace
}  // namespace kvcheck
