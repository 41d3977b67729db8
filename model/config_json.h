// Config <-> JSON, used by safetensors __metadata__ and by case files.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/status.h"

namespace kvcheck {

nlohmann::json config_to_json(const Config& config);

// Every field is required and type-checked; unknown fields are rejected; the
// result is validated. Errors name the field and the value.
Result<Config> config_from_json(const nlohmann::json& json);

// A JSON value as an error message quotes it: compact, never throwing on
// strings that are not UTF-8, and cut short so that hostile input cannot make
// the message huge.
std::string json_for_message(const nlohmann::json& value);

}  // namespace kvcheck
