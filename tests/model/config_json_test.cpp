#include "model/config_json.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "model/rng.h"

namespace kvcheck {
namespace {

using nlohmann::json;

// A config that differs from the defaults in every field, so a field that is
// dropped or swapped on either side shows.
Config unusual_config() {
  Config c;
  c.family = Family::kLlama;
  c.n_layers = 3;
  c.d_model = 40;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 10;
  c.d_ff = 72;
  c.vocab = 97;
  c.max_pos = 123;
  c.rope_theta = 500000.0 / 3.0;
  c.norm_eps = 0.1 + 0.2;  // not the double nearest 0.3
  c.qkv_bias = false;
  return c;
}

TEST(ConfigJson, WritesEveryFieldByName) {
  const json j = config_to_json(unusual_config());
  EXPECT_EQ(j.size(), 12u);
  EXPECT_EQ(j.at("family"), "llama");
  EXPECT_EQ(j.at("n_layers"), 3);
  EXPECT_EQ(j.at("d_model"), 40);
  EXPECT_EQ(j.at("n_heads"), 6);
  EXPECT_EQ(j.at("n_kv_heads"), 2);
  EXPECT_EQ(j.at("head_dim"), 10);
  EXPECT_EQ(j.at("d_ff"), 72);
  EXPECT_EQ(j.at("vocab"), 97);
  EXPECT_EQ(j.at("max_pos"), 123);
  EXPECT_EQ(j.at("rope_theta").get<double>(), 500000.0 / 3.0);
  EXPECT_EQ(j.at("norm_eps").get<double>(), 0.1 + 0.2);
  EXPECT_EQ(j.at("qkv_bias"), false);
}

TEST(ConfigJson, RoundTripsThroughText) {
  for (const Config& c : {gpt2_tiny(), llama_tiny(), unusual_config()}) {
    const std::string text = config_to_json(c).dump();
    const Result<Config> back = config_from_json(json::parse(text));
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value(), c) << text;
  }
}

TEST(ConfigJson, DoublesRoundTripBitwise) {
  const uint64_t seed = 20240611;
  SCOPED_TRACE("seed " + std::to_string(seed));
  SplitMix64 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    Config c = llama_tiny();
    // Random bit patterns in (1, 2^60) for theta and (0, 1] for eps: every
    // mantissa bit is exercised, not just short decimals.
    c.rope_theta = std::bit_cast<double>((uint64_t{1023} + rng.below(60)) << 52 |
                                         (rng.next() & 0xFFFFFFFFFFFFFull));
    if (!(c.rope_theta > 1.0)) c.rope_theta = 3.0;
    c.norm_eps = std::bit_cast<double>((uint64_t{1} + rng.below(1022)) << 52 |
                                       (rng.next() & 0xFFFFFFFFFFFFFull));
    const std::string text = config_to_json(c).dump();
    const Result<Config> back = config_from_json(json::parse(text));
    ASSERT_TRUE(back.ok()) << back.error() << " for " << text;
    ASSERT_EQ(std::bit_cast<uint64_t>(back.value().rope_theta),
              std::bit_cast<uint64_t>(c.rope_theta))
        << text;
    ASSERT_EQ(std::bit_cast<uint64_t>(back.value().norm_eps), std::bit_cast<uint64_t>(c.norm_eps))
        << text;
  }
}

TEST(ConfigJson, AcceptsIntegersForDoubles) {
  json j = config_to_json(llama_tiny());
  j["rope_theta"] = 10000;
  const Result<Config> c = config_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value().rope_theta, 10000.0);
}

struct BadJson {
  const char* what;
  void (*mutate)(json&);
  const char* message;
};

// The window fields are optional: absent they are 0, and a config without a
// window writes neither (old files and metadata stay byte for byte).
TEST(ConfigJson, SlidingWindowIsOptionalAndRoundTrips) {
  Config c = unusual_config();
  EXPECT_FALSE(config_to_json(c).contains("sliding_window"));
  c.sliding_window = 5;
  c.sliding_window_pattern = 3;
  const json j = config_to_json(c);
  EXPECT_EQ(j.at("sliding_window"), 5);
  EXPECT_EQ(j.at("sliding_window_pattern"), 3);
  const Result<Config> back = config_from_json(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back.value(), c);
}

TEST(ConfigJson, RejectsWithFieldAndValue) {
  const BadJson cases[] = {
      {"string for int", [](json& j) { j["n_heads"] = "four"; },
       "config.n_heads: expected an integer, got \"four\""},
      {"float for int", [](json& j) { j["d_model"] = 32.5; },
       "config.d_model: expected an integer, got 32.5"},
      {"integral float for int", [](json& j) { j["d_model"] = 32.0; },
       "config.d_model: expected an integer, got 32.0"},
      {"bool for int", [](json& j) { j["vocab"] = true; },
       "config.vocab: expected an integer, got true"},
      {"int beyond int", [](json& j) { j["max_pos"] = 4294967296ll; },
       "config.max_pos: expected an int, got 4294967296"},
      {"negative beyond int", [](json& j) { j["d_ff"] = -4294967296ll; },
       "config.d_ff: expected an int, got -4294967296"},
      {"string for double", [](json& j) { j["norm_eps"] = "1e-5"; },
       "config.norm_eps: expected a number, got \"1e-5\""},
      {"null for double", [](json& j) { j["rope_theta"] = nullptr; },
       "config.rope_theta: expected a number, got null"},
      {"int for bool", [](json& j) { j["qkv_bias"] = 1; },
       "config.qkv_bias: expected a boolean, got 1"},
      {"family not a string", [](json& j) { j["family"] = 2; },
       "config.family: expected a string, got 2"},
      {"unknown family", [](json& j) { j["family"] = "mistral"; },
       "config.family: expected \"gpt2\" or \"llama\", got \"mistral\""},
      {"unknown field", [](json& j) { j["n_experts"] = 8; }, "config.n_experts: unknown field"},
      {"missing field", [](json& j) { j.erase("head_dim"); }, "config.head_dim: missing"},
      {"not an object",
       [](json& j) {
         j = json::array({1, 2});
       },
       "config: expected a JSON object, got [1,2]"},
      {"invalid config", [](json& j) { j["n_kv_heads"] = 3; },
       "config: n_kv_heads: 3 does not divide n_heads 4"},
      {"negative width", [](json& j) { j["d_model"] = -1; },
       "config: d_model: -1 is out of range [1, 65536]"},
      {"negative window", [](json& j) { j["sliding_window"] = -1; },
       "config: sliding_window: -1 is out of range [0, 1048576]"},
      {"window pattern not an int", [](json& j) { j["sliding_window_pattern"] = "2"; },
       "config.sliding_window_pattern: expected an integer, got \"2\""},
  };
  for (const BadJson& bad : cases) {
    json j = config_to_json(gpt2_tiny());
    bad.mutate(j);
    const Result<Config> c = config_from_json(j);
    ASSERT_FALSE(c.ok()) << bad.what;
    EXPECT_EQ(c.error(), bad.message) << bad.what;
  }
}

// The plugin ABI's parsed form (config_values) walks the same table: the same
// fields as the JSON, value for value, and back to the same config bitwise.
TEST(ConfigValues, HoldWhatTheJsonHolds) {
  Config windowed = unusual_config();
  windowed.sliding_window = 5;
  windowed.sliding_window_pattern = 3;
  for (const Config& c : {gpt2_tiny(), llama_tiny(), unusual_config(), windowed}) {
    const json j = config_to_json(c);
    const std::vector<ConfigValue> values = config_values(c);
    ASSERT_EQ(values.size(), j.size());
    for (const ConfigValue& v : values) {
      const std::string key(v.key);
      ASSERT_TRUE(j.contains(key)) << key;
      if (j.at(key).is_string()) {
        EXPECT_EQ(std::string(v.text), j.at(key).get<std::string>()) << key;
      } else if (j.at(key).is_boolean()) {
        EXPECT_EQ(v.number, j.at(key).get<bool>() ? 1.0 : 0.0) << key;
      } else {
        EXPECT_TRUE(v.text.empty()) << key;
        EXPECT_EQ(v.number, j.at(key).get<double>()) << key;
      }
    }
    const Result<Config> back = config_from_values(values);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value(), c);
    EXPECT_EQ(std::bit_cast<uint64_t>(back.value().norm_eps), std::bit_cast<uint64_t>(c.norm_eps));
  }
}

void set_number(std::vector<ConfigValue>& values, std::string_view key, double number) {
  for (ConfigValue& v : values) {
    if (v.key == key) v.number = number;
  }
}

TEST(ConfigValues, RejectWithTheJsonMessages) {
  struct Bad {
    const char* what;
    void (*mutate)(std::vector<ConfigValue>&);
    const char* message;
  };
  const Bad cases[] = {
      {"fraction for int", [](auto& v) { set_number(v, "d_model", 32.5); },
       "config.d_model: expected an integer, got 32.5"},
      {"int beyond int", [](auto& v) { set_number(v, "max_pos", 4294967296.0); },
       "config.max_pos: expected an int, got 4294967296"},
      {"2 for bool", [](auto& v) { set_number(v, "qkv_bias", 2); },
       "config.qkv_bias: expected a boolean, got 2"},
      {"unknown family",
       [](auto& v) {
         for (ConfigValue& f : v)
           if (f.key == "family") f.text = "mistral";
       },
       "config.family: expected \"gpt2\" or \"llama\", got \"mistral\""},
      {"unknown field",
       [](auto& v) {
         v.push_back({"n_experts", {}, 8});
       },
       "config.n_experts: unknown field"},
      {"given twice", [](auto& v) { v.push_back(v[1]); }, "config.n_layers: given twice"},
      {"missing field", [](auto& v) { v.pop_back(); }, "config.qkv_bias: missing"},
      {"invalid config", [](auto& v) { set_number(v, "n_kv_heads", 3); },
       "config: n_kv_heads: 3 does not divide n_heads 4"},
  };
  for (const Bad& bad : cases) {
    std::vector<ConfigValue> values = config_values(gpt2_tiny());
    bad.mutate(values);
    const Result<Config> c = config_from_values(values);
    ASSERT_FALSE(c.ok()) << bad.what;
    EXPECT_EQ(c.error(), bad.message) << bad.what;
  }
}

TEST(ConfigJson, LongValuesAreCutInMessages) {
  json j = config_to_json(gpt2_tiny());
  j["n_layers"] = std::string(1000, 'x');
  const Result<Config> c = config_from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(),
            "config.n_layers: expected an integer, got \"" + std::string(79, 'x') + "...");
}

}  // namespace
}  // namespace kvcheck
