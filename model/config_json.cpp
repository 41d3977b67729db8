#include "model/config_json.h"

#include <climits>
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
std::string read_int(const json& object, const char* field, int& out) {
  const json& value = object.at(field);
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
std::string read_double(const json& object, const char* field, double& out) {
  const json& value = object.at(field);
  if (!value.is_number()) return field_error(field, "a number", value);
  out = value.get<double>();
  return {};
}

constexpr const char* kFields[] = {"family",     "n_layers",   "d_model",  "n_heads",
                                   "n_kv_heads", "head_dim",   "d_ff",     "vocab",
                                   "max_pos",    "rope_theta", "norm_eps", "qkv_bias"};
// Optional (absent = 0), written only when a window is set, so that configs
// without one keep their old JSON (and the safetensors/GGUF metadata built
// from it) byte for byte.
constexpr const char* kOptionalIntFields[] = {"sliding_window", "sliding_window_pattern"};

}  // namespace

std::string json_for_message(const json& value) {
  constexpr size_t kMaxQuoted = 80;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return text;
}

json config_to_json(const Config& c) {
  json out = json::object();
  out["family"] = family_name(c.family);
  out["n_layers"] = c.n_layers;
  out["d_model"] = c.d_model;
  out["n_heads"] = c.n_heads;
  out["n_kv_heads"] = c.n_kv_heads;
  out["head_dim"] = c.head_dim;
  out["d_ff"] = c.d_ff;
  out["vocab"] = c.vocab;
  out["max_pos"] = c.max_pos;
  // nlohmann prints the shortest text that parses back to the same double.
  out["rope_theta"] = c.rope_theta;
  out["norm_eps"] = c.norm_eps;
  out["qkv_bias"] = c.qkv_bias;
  if (c.sliding_window > 0) {
    out["sliding_window"] = c.sliding_window;
    out["sliding_window_pattern"] = c.sliding_window_pattern;
  }
  return out;
}

Result<Config> config_from_json(const json& object) {
  using R = Result<Config>;
  if (!object.is_object()) {
    return R::failure("config: expected a JSON object, got " + json_for_message(object));
  }
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* field : kFields) known = known || key == field;
    for (const char* field : kOptionalIntFields) known = known || key == field;
    if (!known) return R::failure("config." + key + ": unknown field");
  }
  for (const char* field : kFields) {
    if (!object.contains(field)) return R::failure(std::string("config.") + field + ": missing");
  }

  Config c;
  const json& family = object.at("family");
  if (!family.is_string()) return R::failure(field_error("family", "a string", family));
  const Result<Family> parsed_family = parse_family(family.get<std::string>());
  if (!parsed_family.ok()) return R::failure("config." + parsed_family.error());
  c.family = parsed_family.value();

  struct IntField {
    const char* name;
    int* target;
  };
  const IntField ints[] = {{"n_layers", &c.n_layers}, {"d_model", &c.d_model},
                           {"n_heads", &c.n_heads},   {"n_kv_heads", &c.n_kv_heads},
                           {"head_dim", &c.head_dim}, {"d_ff", &c.d_ff},
                           {"vocab", &c.vocab},       {"max_pos", &c.max_pos}};
  for (const IntField& f : ints) {
    if (std::string error = read_int(object, f.name, *f.target); !error.empty()) {
      return R::failure(error);
    }
  }
  if (std::string error = read_double(object, "rope_theta", c.rope_theta); !error.empty()) {
    return R::failure(error);
  }
  if (std::string error = read_double(object, "norm_eps", c.norm_eps); !error.empty()) {
    return R::failure(error);
  }
  const json& qkv_bias = object.at("qkv_bias");
  if (!qkv_bias.is_boolean()) return R::failure(field_error("qkv_bias", "a boolean", qkv_bias));
  c.qkv_bias = qkv_bias.get<bool>();
  int* const optional_targets[] = {&c.sliding_window, &c.sliding_window_pattern};
  for (size_t i = 0; i < std::size(kOptionalIntFields); ++i) {
    if (!object.contains(kOptionalIntFields[i])) continue;
    if (std::string error = read_int(object, kOptionalIntFields[i], *optional_targets[i]);
        !error.empty()) {
      return R::failure(error);
    }
  }

  if (std::string error = c.validate(); !error.empty()) return R::failure("config: " + error);
  return c;
}

}  // namespace kvcheck
