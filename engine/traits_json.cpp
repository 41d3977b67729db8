// The traits' JSON form (engine/traits_json.h) as one table of sections and
// fields, each reading and writing its own key, so the plugin ABI, the wire
// protocol and `kvcheck backends --json` read and write the same keys.
#include "engine/traits_json.h"

#include <algorithm>
#include <climits>
#include <functional>

#include "model/config_json.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// One table per section: key, and how to read and write it. Reading returns
// an error message, empty on success.
struct Field {
  const char* key;
  std::function<json(const EngineTraits&)> write;
  std::function<std::string(const json&, EngineTraits&)> read;
};

std::string expected(const std::string& path, const char* what, const json& value) {
  return "traits." + path + ": expected " + what + ", got " + json_for_message(value);
}

// A boolean of one section of the traits (`part`: operations, limits or
// arithmetic), named `section` in messages.
template <class Part>
Field flag_field(const char* section, const char* key, Part EngineTraits::*part,
                 bool Part::*member) {
  return {key, [part, member](const EngineTraits& t) { return json((t.*part).*member); },
          [section, key, part, member](const json& v, EngineTraits& t) -> std::string {
            if (!v.is_boolean()) return expected(std::string(section) + "." + key, "a boolean", v);
            (t.*part).*member = v.get<bool>();
            return "";
          }};
}

Field bool_field(const char* key, bool OperationTraits::*member) {
  return flag_field("operations", key, &EngineTraits::operations, member);
}

Field int_field(const char* key, int ShapeLimits::*member) {
  return {key, [member](const EngineTraits& t) { return json(t.limits.*member); },
          [key, member](const json& v, EngineTraits& t) -> std::string {
            if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > INT_MAX)
              return expected(std::string("limits.") + key, "a positive integer", v);
            t.limits.*member = static_cast<int>(v.get<int64_t>());
            return "";
          }};
}

Field limit_flag(const char* key, bool ShapeLimits::*member) {
  return flag_field("limits", key, &EngineTraits::limits, member);
}

// "positions": ["learned", "rope"] names the families by their positions
// (gpt2 learned absolute, llama RoPE) and narrows limits.families to them;
// written from the families, so it and "families" never disagree.
Field positions_field() {
  const auto families_of = [](const json& v, std::vector<Family>& out) -> std::string {
    if (!v.is_array()) return expected("limits.positions", "an array of names", v);
    for (const json& item : v) {
      bool known = false;
      for (const Family f : {Family::kGpt2, Family::kLlama}) {
        if (item == positions_name(f)) out.push_back(f), known = true;
      }
      if (!known) return expected("limits.positions", "\"learned\" or \"rope\" in an array", v);
    }
    return "";
  };
  return {"positions",
          [](const EngineTraits& t) {
            json out = json::array();
            for (const Family f : t.limits.families) out.push_back(positions_name(f));
            return out;
          },
          [families_of](const json& v, EngineTraits& t) -> std::string {
            std::vector<Family> allowed;
            if (std::string error = families_of(v, allowed); !error.empty()) return error;
            std::erase_if(t.limits.families, [&](Family f) {
              return std::find(allowed.begin(), allowed.end(), f) == allowed.end();
            });
            return "";
          }};
}

Field invariance_field(const char* key, Invariance InvarianceTraits::*member) {
  return {key,
          [member](const EngineTraits& t) { return json(invariance_name(t.invariance.*member)); },
          [key, member](const json& v, EngineTraits& t) -> std::string {
            if (v == "bitwise")
              t.invariance.*member = Invariance::kBitwise;
            else if (v == "bounded")
              t.invariance.*member = Invariance::kBounded;
            else
              return expected(std::string("invariance.") + key, "\"bitwise\" or \"bounded\"", v);
            return "";
          }};
}

Result<Precision> parse_precision(const std::string& path, const json& v) {
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    if (v == precision_name(p)) return p;
  }
  return Result<Precision>::failure(expected(path, "\"f32\", \"f16\" or \"bf16\"", v));
}

// A list of positive integers of the limits (head_dims).
Field int_list_field(const char* key, std::vector<int> ShapeLimits::*member) {
  return {
      key,
      [member](const EngineTraits& t) {
        json out = json::array();
        for (int item : t.limits.*member) out.push_back(item);
        return out;
      },
      [key, member](const json& v, EngineTraits& t) -> std::string {
        const std::string path = std::string("limits.") + key;
        if (!v.is_array()) return expected(path, "an array of positive integers", v);
        std::vector<int> items;
        for (const json& item : v) {
          if (!item.is_number_integer() || item.get<int64_t>() < 1 || item.get<int64_t>() > INT_MAX)
            return expected(path, "an array of positive integers", v);
          items.push_back(static_cast<int>(item.get<int64_t>()));
        }
        t.limits.*member = std::move(items);
        return "";
      }};
}

template <class T, class Parse, class Name>
Field list_field(const char* key, std::vector<T> ShapeLimits::*member, Parse parse, Name name) {
  return {key,
          [member, name](const EngineTraits& t) {
            json out = json::array();
            for (T item : t.limits.*member) out.push_back(name(item));
            return out;
          },
          [key, member, parse](const json& v, EngineTraits& t) -> std::string {
            const std::string path = std::string("limits.") + key;
            if (!v.is_array()) return expected(path, "an array of names", v);
            std::vector<T> items;
            for (const json& item : v) {
              if (!item.is_string()) return expected(path, "an array of names", v);
              auto parsed = parse(item.get<std::string>());
              if (!parsed.ok()) return "traits." + path + ": " + parsed.error();
              items.push_back(parsed.value());
            }
            t.limits.*member = std::move(items);
            return "";
          }};
}

struct Section {
  const char* key;
  std::vector<Field> fields;
};

// The operations an engine offers (docs/OPERATIONS.md).
Section operations_section() {
  return {"operations",
          {bool_field("multi_sequence_step", &OperationTraits::multi_sequence_step),
           bool_field("finish", &OperationTraits::finish),
           bool_field("reset", &OperationTraits::reset),
           bool_field("cache_snapshot", &OperationTraits::cache_snapshot),
           bool_field("capacity_refusal", &OperationTraits::capacity_refusal),
           bool_field("fault_switches", &OperationTraits::fault_switches),
           bool_field("storage_map", &OperationTraits::storage_map),
           bool_field("fork", &OperationTraits::fork),
           bool_field("truncate", &OperationTraits::truncate),
           bool_field("paged", &OperationTraits::paged),
           bool_field("pool_report", &OperationTraits::pool_report),
           bool_field("storage_check", &OperationTraits::storage_check),
           bool_field("prefix_cache", &OperationTraits::prefix_cache),
           bool_field("prompt_logits", &OperationTraits::prompt_logits),
           bool_field("sliding_window", &OperationTraits::sliding_window),
           bool_field("abort", &OperationTraits::abort),
           bool_field("cache_keys", &OperationTraits::cache_keys),
           bool_field("offload", &OperationTraits::offload),
           bool_field("erase", &OperationTraits::erase),
           bool_field("shift", &OperationTraits::shift),
           bool_field("div", &OperationTraits::div),
           bool_field("save_restore", &OperationTraits::save_restore)}};
}

// The shapes an engine takes; the generators draw inside them.
Section limits_section() {
  return {"limits",
          {list_field("families", &ShapeLimits::families, parse_family, family_name),
           list_field("kv_dtypes", &ShapeLimits::kv_dtypes, parse_kv_dtype, kv_dtype_name),
           int_field("min_head_dim", &ShapeLimits::min_head_dim),
           int_field("max_head_dim", &ShapeLimits::max_head_dim),
           int_field("head_dim_multiple", &ShapeLimits::head_dim_multiple),
           int_list_field("head_dims", &ShapeLimits::head_dims),
           int_field("min_vocab", &ShapeLimits::min_vocab),
           int_field("max_vocab", &ShapeLimits::max_vocab),
           int_field("max_layers", &ShapeLimits::max_layers),
           int_field("min_d_model", &ShapeLimits::min_d_model),
           int_field("max_d_model", &ShapeLimits::max_d_model),
           int_field("d_model_multiple", &ShapeLimits::d_model_multiple),
           int_field("max_capacity", &ShapeLimits::max_capacity),
           limit_flag("capacity_shared", &ShapeLimits::capacity_shared),
           int_field("max_rows", &ShapeLimits::max_rows),
           int_field("max_step_tokens", &ShapeLimits::max_step_tokens),
           list_field("query_width_is_d_model", &ShapeLimits::query_width_is_d_model, parse_family,
                      family_name),
           list_field("d_ff_is_4x_d_model", &ShapeLimits::d_ff_is_4x_d_model, parse_family,
                      family_name),
           limit_flag("mha_only", &ShapeLimits::mha_only),
           positions_field()}};
}

// What an engine promises about its own results: which self-comparisons
// are bitwise and which bounded (docs/ENGINES.md, "invariance").
Section invariance_section() {
  return {"invariance",
          {invariance_field("chunking", &InvarianceTraits::chunking),
           invariance_field("batch", &InvarianceTraits::batch),
           invariance_field("reset", &InvarianceTraits::reset),
           invariance_field("compaction", &InvarianceTraits::compaction),
           invariance_field("gqa_twin", &InvarianceTraits::gqa_twin),
           invariance_field("determinism", &InvarianceTraits::determinism),
           invariance_field("sharing", &InvarianceTraits::sharing),
           invariance_field("rollback", &InvarianceTraits::rollback)}};
}

// How an engine computes, from which the tolerance is derived
// (docs/TOLERANCE.md).
Section arithmetic_section() {
  auto precision = [](const char* key, Precision ArithmeticTraits::*member) {
    return Field{
        key, [member](const EngineTraits& t) { return json(precision_name(t.arithmetic.*member)); },
        [key, member](const json& v, EngineTraits& t) -> std::string {
          auto p = parse_precision(std::string("arithmetic.") + key, v);
          if (!p.ok()) return p.error();
          t.arithmetic.*member = p.value();
          return "";
        }};
  };
  auto flag = [](const char* key, bool ArithmeticTraits::*member) {
    return flag_field("arithmetic", key, &EngineTraits::arithmetic, member);
  };
  const Field quantizer{
      "kv_quantizer",
      [](const EngineTraits& t) { return json(kv_quantizer_name(t.arithmetic.kv_quantizer)); },
      [](const json& v, EngineTraits& t) -> std::string {
        for (KvQuantizer q : {KvQuantizer::kKvcheck, KvQuantizer::kGgml}) {
          if (v == kv_quantizer_name(q)) return t.arithmetic.kv_quantizer = q, "";
        }
        return expected("arithmetic.kv_quantizer", "\"kvcheck\" or \"ggml\"", v);
      }};
  // V's own type: a kv_dtype name, or null (absent) for V stored as K.
  const Field v_dtype{"v_dtype",
                      [](const EngineTraits& t) {
                        const std::optional<KvDtype>& v = t.arithmetic.v_dtype;
                        return v ? json(kv_dtype_name(*v)) : json(nullptr);
                      },
                      [](const json& v, EngineTraits& t) -> std::string {
                        if (v.is_null()) return t.arithmetic.v_dtype.reset(), "";
                        const std::string what = std::string("null or one of ") + kv_dtype_names();
                        if (!v.is_string()) return expected("arithmetic.v_dtype", what.c_str(), v);
                        auto parsed = parse_kv_dtype(v.get<std::string>());
                        if (!parsed.ok()) return "traits.arithmetic.v_dtype: " + parsed.error();
                        t.arithmetic.v_dtype = parsed.value();
                        return "";
                      }};
  return {"arithmetic",
          {precision("accumulation", &ArithmeticTraits::accumulation),
           precision("activations", &ArithmeticTraits::activations),
           precision("weights", &ArithmeticTraits::weights),
           flag("rope_angles_in_float", &ArithmeticTraits::rope_angles_in_float),
           flag("queries_rounded_to_kv_dtype", &ArithmeticTraits::queries_rounded_to_kv_dtype),
           precision("kv_read", &ArithmeticTraits::kv_read),
           flag("probabilities_rounded_to_kv_dtype",
                &ArithmeticTraits::probabilities_rounded_to_kv_dtype),
           flag("online_softmax", &ArithmeticTraits::online_softmax),
           precision("value_accumulation", &ArithmeticTraits::value_accumulation), quantizer,
           flag("k_blocks_in_pair_order", &ArithmeticTraits::k_blocks_in_pair_order), v_dtype}};
}

const std::vector<Section>& sections() {
  static const std::vector<Section> kSections = {operations_section(), limits_section(),
                                                 invariance_section(), arithmetic_section()};
  return kSections;
}

std::string read_identity(const json& object, EngineTraits& t) {
  if (!object.contains("identity")) return "traits.identity: missing";
  const json& id = object.at("identity");
  if (!id.is_object()) return expected("identity", "an object", id);
  for (const auto& [key, value] : id.items()) {
    if (key != "name" && key != "version") return "traits.identity." + key + ": unknown key";
    if (!value.is_string() || value.get<std::string>().empty())
      return expected("identity." + key, "a non-empty string", value);
  }
  if (!id.contains("name")) return "traits.identity.name: missing";
  t.identity.name = id.at("name").get<std::string>();
  if (id.contains("version")) t.identity.version = id.at("version").get<std::string>();
  return "";
}

std::string read_section(const Section& section, const json& object, EngineTraits& t) {
  if (!object.is_object()) return expected(section.key, "an object", object);
  for (const auto& [key, value] : object.items()) {
    const Field* field = nullptr;
    for (const Field& f : section.fields) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) return "traits." + std::string(section.key) + "." + key + ": unknown key";
    if (std::string error = field->read(value, t); !error.empty()) return error;
  }
  return "";
}

}  // namespace

json traits_to_json(const EngineTraits& traits) {
  json out = json::object();
  out["identity"] = {{"name", traits.identity.name}, {"version", traits.identity.version}};
  for (const Section& section : sections()) {
    json s = json::object();
    for (const Field& f : section.fields) {
      json value = f.write(traits);
      if (!value.is_null()) s[f.key] = std::move(value);  // null: unset, left out
    }
    out[section.key] = std::move(s);
  }
  return out;
}

Result<EngineTraits> traits_from_json(const json& object) {
  using R = Result<EngineTraits>;
  if (!object.is_object()) {
    return R::failure("traits: expected a JSON object, got " + json_for_message(object));
  }
  EngineTraits t;
  for (const auto& [key, value] : object.items()) {
    bool known = key == "identity";
    for (const Section& section : sections()) known = known || key == section.key;
    if (!known) return R::failure("traits." + key + ": unknown key");
  }
  if (std::string error = read_identity(object, t); !error.empty()) return R::failure(error);
  for (const Section& section : sections()) {
    if (!object.contains(section.key)) continue;
    if (std::string error = read_section(section, object.at(section.key), t); !error.empty())
      return R::failure(error);
  }
  if (std::string error = t.validate(); !error.empty()) return R::failure("traits." + error);
  return t;
}

Result<EngineTraits> traits_from_json_text(std::string_view text) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return Result<EngineTraits>::failure("traits: not valid JSON: " +
                                         std::string(text.substr(0, 80)));
  }
  return traits_from_json(parsed);
}

}  // namespace kvcheck
