#include "model/hf_config.h"

#include <climits>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>

#include "model/config_json.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// Reads one integer field. Throws InputError (caught below) so the parser
// reads as a list of fields.
class FieldReader {
 public:
  FieldReader(const json& object, const std::string& name) : object_(object), name_(name) {}

  bool has(const char* field) const {
    return object_.contains(field) && !object_.at(field).is_null();
  }

  // A field that must be there: a positive int.
  int required(const char* field) const {
    if (!has(field)) fail(field, "missing; expected a positive integer");
    return positive(field);
  }

  // A field that may be absent or null.
  std::optional<int> optional(const char* field) const {
    if (!has(field)) return std::nullopt;
    return positive(field);
  }

  bool flag(const char* field, bool fallback) const {
    if (!has(field)) return fallback;
    const json& value = object_.at(field);
    if (!value.is_boolean()) fail(field, "expected true or false, got " + json_for_message(value));
    return value.get<bool>();
  }

  [[noreturn]] void fail(const char* field, const std::string& what) const {
    throw InputError(name_ + ": " + field + ": " + what);
  }

 private:
  int positive(const char* field) const {
    const json& value = object_.at(field);
    int64_t v = 0;  // stays out of range for anything but an integer
    if (value.is_number_unsigned()) {
      v = value.get<uint64_t>() > uint64_t(INT_MAX) ? -1 : int64_t(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      v = value.get<int64_t>();
    }
    if (v < 1 || v > INT_MAX) {
      fail(field, "expected a positive integer, got " + json_for_message(value));
    }
    return int(v);
  }

  const json& object_;
  const std::string& name_;
};

// The three fields both styles have, under their own names.
KvShape base_shape(const FieldReader& r, const std::string& name, const char* layers,
                   const char* hidden, const char* heads) {
  KvShape s;
  s.name = name;
  s.n_layers = r.required(layers);
  s.hidden = r.required(hidden);
  s.n_heads = r.required(heads);
  return s;
}

KvShape gpt2_shape(const FieldReader& r, const std::string& name) {
  KvShape s = base_shape(r, name, "n_layer", "n_embd", "n_head");
  s.n_kv_heads = s.n_heads;  // GPT-2 is multi-head attention
  if (s.hidden % s.n_heads != 0) {
    r.fail("n_head",
           std::to_string(s.n_heads) + " does not divide n_embd " + std::to_string(s.hidden));
  }
  s.head_dim = s.hidden / s.n_heads;
  // Both name the positions in GPT-2 configs; older ones carry only n_ctx.
  if (!r.has("n_positions") && !r.has("n_ctx")) {
    r.fail("n_positions", "missing (and no n_ctx); expected a positive integer");
  }
  s.max_context = r.has("n_positions") ? r.required("n_positions") : r.required("n_ctx");
  return s;
}

KvShape llama_shape(const FieldReader& r, const std::string& name) {
  KvShape s = base_shape(r, name, "num_hidden_layers", "hidden_size", "num_attention_heads");
  // transformers' rule: no num_key_value_heads means one per query head.
  s.n_kv_heads = r.optional("num_key_value_heads").value_or(s.n_heads);
  if (s.n_heads % s.n_kv_heads != 0) {
    r.fail("num_key_value_heads", std::to_string(s.n_kv_heads) +
                                      " does not divide num_attention_heads " +
                                      std::to_string(s.n_heads));
  }
  if (const std::optional<int> d = r.optional("head_dim")) {
    s.head_dim = *d;
  } else if (s.hidden % s.n_heads != 0) {
    r.fail("num_attention_heads", std::to_string(s.n_heads) + " does not divide hidden_size " +
                                      std::to_string(s.hidden) + " and there is no head_dim");
  } else {
    s.head_dim = s.hidden / s.n_heads;
  }
  s.max_context = r.required("max_position_embeddings");
  // Qwen2 configs carry a sliding_window that use_sliding_window turns off.
  if (r.flag("use_sliding_window", true)) s.window = r.optional("sliding_window").value_or(0);
  return s;
}

}  // namespace

Result<KvShape> kv_shape_from_hf_config(const json& config, const std::string& name) {
  using R = Result<KvShape>;
  if (!config.is_object()) {
    return R::failure(name + ": expected a JSON object, got " + json_for_message(config));
  }
  const FieldReader reader(config, name);
  try {
    std::optional<KvShape> shape;
    if (reader.has("num_hidden_layers")) {
      shape = llama_shape(reader, name);
    } else if (reader.has("n_layer")) {
      shape = gpt2_shape(reader, name);
    }
    if (shape) {
      if (const std::string e = shape->validate(); !e.empty()) return R::failure(name + ": " + e);
      return *shape;
    }
  } catch (const InputError& e) {
    return R::failure(e.what());
  }
  return R::failure(name +
                    ": num_hidden_layers: missing (or n_layer for a GPT-2 config); is this a "
                    "Hugging Face config.json?");
}

Result<KvShape> read_hf_config_file(const std::string& path) {
  using R = Result<KvShape>;
  std::ifstream in(path);
  if (!in) return R::failure("--config: cannot read \"" + path + "\"");
  std::ostringstream text;
  text << in.rdbuf();
  Result<json> parsed = parse_json_text(text.str(), path);
  if (!parsed) return R::failure(parsed.error());
  return kv_shape_from_hf_config(parsed.value(), path);
}

}  // namespace kvcheck
