// Config <-> JSON, used by safetensors __metadata__ and by case files.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/status.h"

namespace kvcheck {

nlohmann::json config_to_json(const Config& config);

// Every field is required and type-checked; unknown fields are rejected; the
// result is validated. Errors name the field and the value.
Result<Config> config_from_json(const nlohmann::json& json);

// One config field without JSON, as the plugin ABI passes the config beside
// its JSON text (include/kvcheck/engine_plugin.h, kvcheck_config_value): the
// same keys, `text` for the family, `number` for the rest (booleans 0 or 1).
// From config_values, key and text view static NUL-terminated strings (the
// table's names, family_name), so they can be passed on as C strings.
struct ConfigValue {
  std::string_view key;
  std::string_view text;
  double number = 0.0;
};

// The fields config_to_json writes, in the same order and under the same
// rules, built from the same table.
std::vector<ConfigValue> config_values(const Config& config);

// Every field's JSON key, in the table's order, optional ones included (for
// a tool that takes each field as a flag, as kvcheck-export does).
std::vector<std::string_view> config_field_names();

// The same checks and messages as config_from_json, each value taken as the
// JSON value it stands for (an integral number as an integer, a boolean's 0
// or 1 as false or true); a key given twice is an error.
Result<Config> config_from_values(std::span<const ConfigValue> values);

// A JSON value as an error message quotes it: compact, never throwing on
// strings that are not UTF-8, and cut short so that hostile input cannot make
// the message huge.
std::string json_for_message(const nlohmann::json& value);

// JSON text parsed, or why not: "WHAT: not valid JSON at line 3, column 12:
// syntax error while parsing object key - unexpected ','; expected string
// literal", so that a person finds the place in a file they wrote.
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& what);

}  // namespace kvcheck
