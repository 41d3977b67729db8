#include "model/config_json.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace kvcheck {

namespace {

using nlohmann::json;

std::string field_error(std::string_view field, std::string_view expected, const json& value) {
  return "config." + std::string(field) + ": expected " + std::string(expected) + ", got " +
         json_for_message(value);
}

// Empty on success. JSON integers arrive signed or unsigned depending on their
// sign, so both are range-checked against int before narrowing.
std::string read_int(const json& value, const char* field, int& out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT_MAX)) return field_error(field, "an int", value);
    out = static_cast<int>(v);
    return {};
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < INT_MIN || v > INT_MAX) return field_error(field, "an int", value);
    out = static_cast<int>(v);
    return {};
  }
  return field_error(field, "an integer", value);
}

// Integers are accepted too: a hand-written or Python-written config may say
// 10000 for rope_theta.
std::string read_double(const json& value, const char* field, double& out) {
  if (!value.is_number()) return field_error(field, "a number", value);
  out = value.get<double>();
  return {};
}

// The one table of config fields, in the order errors are reported. The
// window's two fields are optional (absent = 0) and written only when a
// window is set, so that configs without one keep their old JSON (and the
// safetensors/GGUF metadata built from it) byte for byte.
enum class FieldKind { kFamily, kInt, kDouble, kBool };
struct ConfigField {
  const char* name;
  FieldKind kind;
  bool optional;
  int Config::*int_member = nullptr;
  double Config::*double_member = nullptr;
  bool Config::*bool_member = nullptr;
};
const ConfigField kConfigFields[] = {
    {"family", FieldKind::kFamily, false},
    {"n_layers", FieldKind::kInt, false, &Config::n_layers},
    {"d_model", FieldKind::kInt, false, &Config::d_model},
    {"n_heads", FieldKind::kInt, false, &Config::n_heads},
    {"n_kv_heads", FieldKind::kInt, false, &Config::n_kv_heads},
    {"head_dim", FieldKind::kInt, false, &Config::head_dim},
    {"d_ff", FieldKind::kInt, false, &Config::d_ff},
    {"vocab", FieldKind::kInt, false, &Config::vocab},
    {"max_pos", FieldKind::kInt, false, &Config::max_pos},
    {"rope_theta", FieldKind::kDouble, false, nullptr, &Config::rope_theta},
    {"norm_eps", FieldKind::kDouble, false, nullptr, &Config::norm_eps},
    {"qkv_bias", FieldKind::kBool, false, nullptr, nullptr, &Config::qkv_bias},
    {"sliding_window", FieldKind::kInt, true, &Config::sliding_window},
    {"sliding_window_pattern", FieldKind::kInt, true, &Config::sliding_window_pattern}};

bool written(const ConfigField& field, const Config& c) {
  return !field.optional || c.sliding_window > 0;
}

const ConfigField* field_named(std::string_view name) {
  for (const ConfigField& field : kConfigFields) {
    if (name == field.name) return &field;
  }
  return nullptr;
}

// Reads one field's JSON value into `c`; empty on success.
std::string read_field(const ConfigField& field, const json& value, Config& c) {
  switch (field.kind) {
    case FieldKind::kFamily: {
      if (!value.is_string()) return field_error(field.name, "a string", value);
      const Result<Family> family = parse_family(value.get<std::string>());
      if (!family.ok()) return "config." + family.error();
      c.family = family.value();
      return {};
    }
    case FieldKind::kInt:
      return read_int(value, field.name, c.*field.int_member);
    case FieldKind::kDouble:
      return read_double(value, field.name, c.*field.double_member);
    case FieldKind::kBool:
      if (!value.is_boolean()) return field_error(field.name, "a boolean", value);
      c.*field.bool_member = value.get<bool>();
      return {};
  }
  return {};
}

}  // namespace

Result<json> parse_json_text(std::string_view text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    std::string why = e.what();
    if (const size_t at = why.find("parse error at "); at != std::string::npos)
      why = why.substr(at + 15);
    return Result<json>::failure(what + ": not valid JSON at " + why);
  }
}

std::string json_for_message(const json& value) {
  constexpr size_t kMaxQuoted = 80;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return text;
}

json config_to_json(const Config& c) {
  json out = json::object();
  for (const ConfigField& field : kConfigFields) {
    if (!written(field, c)) continue;
    switch (field.kind) {
      case FieldKind::kFamily:
        out[field.name] = family_name(c.family);
        break;
      case FieldKind::kInt:
        out[field.name] = c.*field.int_member;
        break;
      case FieldKind::kDouble:
        // nlohmann prints the shortest text that parses back to the same double.
        out[field.name] = c.*field.double_member;
        break;
      case FieldKind::kBool:
        out[field.name] = c.*field.bool_member;
        break;
    }
  }
  return out;
}

Result<Config> config_from_json(const json& object) {
  using R = Result<Config>;
  if (!object.is_object()) {
    return R::failure("config: expected a JSON object, got " + json_for_message(object));
  }
  for (const auto& [key, value] : object.items()) {
    if (field_named(key) == nullptr) return R::failure("config." + key + ": unknown field");
  }
  for (const ConfigField& field : kConfigFields) {
    if (!field.optional && !object.contains(field.name)) {
      return R::failure(std::string("config.") + field.name + ": missing");
    }
  }
  Config c;
  for (const ConfigField& field : kConfigFields) {
    const auto it = object.find(field.name);
    if (it == object.end()) continue;
    if (std::string error = read_field(field, *it, c); !error.empty()) return R::failure(error);
  }
  if (std::string error = c.validate(); !error.empty()) return R::failure("config: " + error);
  return c;
}

std::vector<std::string_view> config_field_names() {
  std::vector<std::string_view> names;
  for (const ConfigField& field : kConfigFields) names.push_back(field.name);
  return names;
}

std::vector<ConfigValue> config_values(const Config& c) {
  std::vector<ConfigValue> values;
  for (const ConfigField& field : kConfigFields) {
    if (!written(field, c)) continue;
    ConfigValue v{field.name, {}, 0.0};
    switch (field.kind) {
      case FieldKind::kFamily:
        v.text = family_name(c.family);
        break;
      case FieldKind::kInt:
        v.number = c.*field.int_member;
        break;
      case FieldKind::kDouble:
        v.number = c.*field.double_member;
        break;
      case FieldKind::kBool:
        v.number = c.*field.bool_member ? 1.0 : 0.0;
        break;
    }
    values.push_back(v);
  }
  return values;
}

// The values go through the same checks as JSON: each is taken as the JSON
// value it stands for, a scalar (no allocation but the family's text).
Result<Config> config_from_values(std::span<const ConfigValue> values) {
  using R = Result<Config>;
  Config c;
  uint32_t seen = 0;  // bit i: kConfigFields[i] given
  for (const ConfigValue& v : values) {
    const ConfigField* field = field_named(v.key);
    if (field == nullptr) return R::failure("config." + std::string(v.key) + ": unknown field");
    const uint32_t bit = 1u << (field - kConfigFields);
    if (seen & bit) return R::failure("config." + std::string(v.key) + ": given twice");
    seen |= bit;
    json value;
    if (field->kind == FieldKind::kFamily) {
      value = std::string(v.text);
    } else if (field->kind == FieldKind::kBool && (v.number == 0.0 || v.number == 1.0)) {
      value = v.number == 1.0;
    } else if (std::nearbyint(v.number) == v.number && std::fabs(v.number) < 0x1p53) {
      value = int64_t(v.number);
    } else {
      value = v.number;
    }
    if (std::string error = read_field(*field, value, c); !error.empty()) return R::failure(error);
  }
  for (const ConfigField& field : kConfigFields) {
    if (!field.optional && !(seen & (1u << (&field - kConfigFields)))) {
      return R::failure(std::string("config.") + field.name + ": missing");
    }
  }
  if (std::string error = c.validate(); !error.empty()) return R::failure("config: " + error);
  return c;
}

}  // namespace kvcheck
