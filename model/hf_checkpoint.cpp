#include "model/hf_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string_view>
#include <vector>

#include "model/config_json.h"
#include "model/file_bytes.h"
#include "model/hf_config.h"
#include "model/rng.h"
#include "model/safetensors.h"
#include "model/tensor_layout.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------
// config.json

// Fields every PretrainedConfig may carry that do not touch the forward pass
// of one token sequence: bookkeeping, token ids, generation defaults, labels.
constexpr std::string_view kBookkeeping[] = {"_name_or_path",
                                             "_commit_hash",
                                             "_attn_implementation",
                                             "attn_implementation",
                                             "architectures",
                                             "model_type",
                                             "torch_dtype",
                                             "dtype",
                                             "transformers_version",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "use_cache",
                                             "initializer_range",
                                             "return_dict",
                                             "output_hidden_states",
                                             "output_attentions",
                                             "torchscript",
                                             "use_bfloat16",
                                             "tf_legacy_loss",
                                             "pruned_heads",
                                             "chunk_size_feed_forward",
                                             "is_encoder_decoder",
                                             "is_decoder",
                                             "tie_encoder_decoder",
                                             "max_length",
                                             "min_length",
                                             "do_sample",
                                             "early_stopping",
                                             "num_beams",
                                             "num_beam_groups",
                                             "diversity_penalty",
                                             "temperature",
                                             "top_k",
                                             "top_p",
                                             "typical_p",
                                             "repetition_penalty",
                                             "length_penalty",
                                             "no_repeat_ngram_size",
                                             "encoder_no_repeat_ngram_size",
                                             "bad_words_ids",
                                             "num_return_sequences",
                                             "output_scores",
                                             "return_dict_in_generate",
                                             "forced_bos_token_id",
                                             "forced_eos_token_id",
                                             "remove_invalid_values",
                                             "exponential_decay_length_penalty",
                                             "suppress_tokens",
                                             "begin_suppress_tokens",
                                             "finetuning_task",
                                             "id2label",
                                             "label2id",
                                             "tokenizer_class",
                                             "prefix",
                                             "problem_type",
                                             "task_specific_params",
                                             "cross_attention_hidden_size"};

// Dropout is off in inference; the summary head belongs to GPT2DoubleHeads.
constexpr std::string_view kGpt2Inert[] = {"resid_pdrop",
                                           "embd_pdrop",
                                           "attn_pdrop",
                                           "summary_type",
                                           "summary_use_proj",
                                           "summary_activation",
                                           "summary_proj_to_labels",
                                           "summary_first_dropout"};
// pretraining_tp > 1 splits each matmul into slices and adds them up: the same
// arithmetic, summed in another order.
constexpr std::string_view kLlamaInert[] = {"attention_dropout", "pretraining_tp"};

template <size_t N>
bool listed(const std::string_view (&list)[N], std::string_view key) {
  for (std::string_view k : list) {
    if (k == key) return true;
  }
  return false;
}

// Reads config.json fields for one family; every field it reads is marked,
// and whatever no reader marked is refused at the end.
class Fields {
 public:
  Fields(const json& object, const std::string& name) : object_(object), name_(name) {}

  bool has(const char* field) {
    seen_.insert(field);
    return object_.contains(field) && !object_.at(field).is_null();
  }
  const json& at(const char* field) { return object_.at(field); }

  [[noreturn]] void refuse(const char* field, const std::string& why) {
    throw InputError(name_ + ": " + field + ": " + json_for_message(object_.at(field)) + ": " +
                     why);
  }
  [[noreturn]] void fail(const char* field, const std::string& what) {
    throw InputError(name_ + ": " + field + ": " + what);
  }

  // Present and not null: refused, because kvcheck would compute without it.
  void refuse_if_set(const char* field, const std::string& why) {
    if (has(field)) refuse(field, why);
  }

  bool flag(const char* field, bool fallback) {
    if (!has(field)) return fallback;
    if (!at(field).is_boolean()) {
      fail(field, "expected true or false, got " + json_for_message(at(field)));
    }
    return at(field).get<bool>();
  }
  // A flag whose non-default value changes the arithmetic.
  void flag_must_be(const char* field, bool fallback, bool allowed, const std::string& why) {
    if (flag(field, fallback) != allowed) refuse(field, why);
  }

  double number(const char* field, double fallback) {
    if (!has(field)) return fallback;
    if (!at(field).is_number())
      fail(field, "expected a number, got " + json_for_message(at(field)));
    return at(field).get<double>();
  }

  int positive(const char* field) {
    if (!has(field)) fail(field, "missing; expected a positive integer");
    const json& v = at(field);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30)) {
      fail(field, "expected a positive integer, got " + json_for_message(v));
    }
    return int(v.get<int64_t>());
  }

  std::string text(const char* field, const std::string& fallback) {
    if (!has(field)) return fallback;
    if (!at(field).is_string())
      fail(field, "expected a string, got " + json_for_message(at(field)));
    return at(field).get<std::string>();
  }

  // Anything left is a field kvcheck does not know, so it cannot say that
  // the field leaves the arithmetic alone.
  template <size_t N>
  void refuse_unknown(const std::string_view (&inert)[N], const char* family) {
    for (const auto& [key, value] : object_.items()) {
      if (seen_.contains(key) || listed(kBookkeeping, key) || listed(inert, key)) continue;
      throw InputError(name_ + ": " + key + ": " + json_for_message(value) +
                       ": a field kvcheck's " + family +
                       " loader does not know; it may change the model's arithmetic, so the "
                       "model is refused (docs/MODELS.md)");
    }
  }

 private:
  const json& object_;
  const std::string& name_;
  std::set<std::string, std::less<>> seen_;
};

// The fields kv_shape_from_hf_config reads (layers, widths, heads, context,
// window), marked as seen.
void mark_shape_fields(Fields& f, bool gpt2) {
  const char* gpt2_fields[] = {"n_layer", "n_embd", "n_head", "n_positions", "n_ctx"};
  const char* llama_fields[] = {"num_hidden_layers",   "hidden_size", "num_attention_heads",
                                "num_key_value_heads", "head_dim",    "max_position_embeddings"};
  if (gpt2) {
    for (const char* field : gpt2_fields) f.has(field);
  } else {
    for (const char* field : llama_fields) f.has(field);
  }
}

void read_gpt2(Fields& f, HfModelConfig& out) {
  Config& c = out.config;
  c.family = Family::kGpt2;
  c.n_kv_heads = c.n_heads;  // GPT-2 is multi-head attention
  c.qkv_bias = true;         // c_attn always has a bias
  c.d_ff = f.has("n_inner") ? f.positive("n_inner") : 4 * c.d_model;
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  const std::string act = f.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast") {
    f.refuse("activation_function",
             "kvcheck's gpt2 computes GELU in its tanh form (gelu_new, gelu_pytorch_tanh, "
             "gelu_fast), not this one");
  }
  f.flag_must_be("scale_attn_weights", true, true,
                 "kvcheck always scales attention scores by 1/sqrt(head_dim)");
  f.flag_must_be("scale_attn_by_inverse_layer_idx", false, false,
                 "kvcheck does not scale attention by 1/(layer+1)");
  f.flag_must_be("reorder_and_upcast_attn", false, false,
                 "kvcheck does not implement the reordered, upcast attention");
  f.flag_must_be("add_cross_attention", false, false, "kvcheck has no cross-attention");
  out.tie_word_embeddings = f.flag("tie_word_embeddings", true);
  f.refuse_unknown(kGpt2Inert, "gpt2");
}

void read_rope_parameters(Fields& f, Config& c) {
  // transformers 5 moves rope_theta (and the scaling) into rope_parameters.
  if (!f.has("rope_parameters")) return;
  const json& p = f.at("rope_parameters");
  if (!p.is_object()) f.refuse("rope_parameters", "expected an object");
  for (const auto& [key, value] : p.items()) {
    if (key == "rope_type") {
      if (value != "default") {
        f.refuse("rope_parameters", "rope_type " + json_for_message(value) +
                                        ": kvcheck implements only the default RoPE (no scaling)");
      }
    } else if (key == "rope_theta") {
      if (!value.is_number()) f.refuse("rope_parameters", "rope_theta is not a number");
      c.rope_theta = value.get<double>();
    } else {
      f.refuse("rope_parameters", "field \"" + key +
                                      "\" changes RoPE; kvcheck implements only "
                                      "rope_type default with rope_theta");
    }
  }
}

void read_llama(Fields& f, HfModelConfig& out) {
  Config& c = out.config;
  c.family = Family::kLlama;
  c.qkv_bias = false;
  c.d_ff = f.positive("intermediate_size");
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  read_rope_parameters(f, c);
  const std::string act = f.text("hidden_act", "silu");
  if (act != "silu" && act != "swish") {
    f.refuse("hidden_act", "kvcheck's llama computes SwiGLU with silu, not this activation");
  }
  f.refuse_if_set("rope_scaling", "kvcheck implements RoPE without scaling");
  f.flag_must_be("attention_bias", false, false,
                 "kvcheck's llama has no q/k/v/o biases (attention_bias must be false)");
  f.flag_must_be("mlp_bias", false, false,
                 "kvcheck's llama has no MLP biases (mlp_bias must be false)");
  if (f.has("partial_rotary_factor") && f.number("partial_rotary_factor", 1.0) != 1.0) {
    f.refuse("partial_rotary_factor", "kvcheck rotates the whole head");
  }
  if (f.flag("use_sliding_window", true)) {
    f.refuse_if_set("sliding_window",
                    "kvcheck's model attends to every earlier position (no sliding window)");
  } else {
    f.has("sliding_window");  // present but switched off, as Qwen2 configs write it
  }
  f.has("max_window_layers");
  out.tie_word_embeddings = f.flag("tie_word_embeddings", false);
  f.refuse_unknown(kLlamaInert, "llama");
}

// ---------------------------------------------------------------------------
// Files

// The safetensors files of the folder: the shards the index names, else
// model.safetensors.
Result<std::vector<std::string>> safetensors_files(const std::filesystem::path& dir) {
  using R = Result<std::vector<std::string>>;
  std::error_code ec;
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index, ec)) {
    Result<std::vector<uint8_t>> bytes = read_file_bytes(index.string());
    if (!bytes) return R::failure(bytes.error());
    const json parsed = json::parse(bytes.value().begin(), bytes.value().end(), nullptr, false);
    if (parsed.is_discarded() || !parsed.contains("weight_map") ||
        !parsed.at("weight_map").is_object()) {
      return R::failure(index.string() + ": expected JSON with a \"weight_map\" object");
    }
    std::set<std::string> shards;
    for (const auto& [tensor, file] : parsed.at("weight_map").items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return R::failure(index.string() + ": weight_map." + tensor +
                          ": expected a file name in the folder, got " + json_for_message(file));
      }
      shards.insert(file.get<std::string>());
    }
    return std::vector<std::string>(shards.begin(), shards.end());
  }
  if (std::filesystem::exists(dir / "model.safetensors", ec)) {
    return std::vector<std::string>{"model.safetensors"};
  }
  return R::failure(dir.string() +
                    ": no model.safetensors (nor model.safetensors.index.json); kvcheck reads "
                    "only safetensors checkpoints");
}

// The checkpoint's name for a tensor under kvcheck's name table
// (model/tensor_layout.cpp): the base model's prefix (transformer. for GPT-2,
// model. for Llama, taken from the final norm's name) added where the file,
// saved from a bare GPT2Model/LlamaModel, has none.
std::string full_name(const std::string& name, Family family) {
  const std::string norm = hf_tensor_name(family, "final_norm");
  const std::string prefix = norm.substr(0, norm.find('.') + 1);
  if (name == hf_tensor_name(family, "lm_head") || name.rfind(prefix, 0) == 0) return name;
  return prefix + name;
}

// Buffers that are not parameters, which real checkpoints carry: GPT-2's
// causal mask and its fill value, Llama's RoPE frequencies. The first two are
// what kvcheck computes anyway; the frequencies are checked below.
bool is_gpt2_buffer(const std::string& name) {
  static const std::regex pattern(R"(transformer\.h\.\d+\.attn\.(bias|masked_bias))");
  return std::regex_match(name, pattern);
}
bool is_rope_buffer(const std::string& name) {
  static const std::regex pattern(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)");
  return std::regex_match(name, pattern);
}

// inv_freq[i] = theta^(-2i/D): refused when it says another theta or width.
std::string check_inv_freq(const std::string& name, const SafetensorsTensor& t, const Config& c) {
  if (t.shape.size() != 1 || t.shape[0] != uint64_t(c.head_dim / 2)) {
    return "tensor \"" + name + "\": RoPE frequencies of " +
           (t.shape.empty() ? std::string("rank 0") : std::to_string(t.shape[0])) +
           " elements, head_dim " + std::to_string(c.head_dim) + " needs " +
           std::to_string(c.head_dim / 2);
  }
  std::vector<float> values(c.head_dim / 2);  // [D/2]
  if (std::string error = decode_tensor(name, t, values); !error.empty()) return error;
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = std::pow(c.rope_theta, -2.0 * double(i) / c.head_dim);
    if (std::abs(values[i] - want) > 1e-6 * want + 1e-30) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "tensor \"%s\": element %zu is %.9g, but rope_theta %g gives %.9g; the "
                    "checkpoint's RoPE differs from config.json's",
                    name.c_str(), i, double(values[i]), c.rope_theta, want);
      return text;
    }
  }
  return {};
}

std::string hex_hash(uint64_t h) {
  char text[32];
  std::snprintf(text, sizeof text, "fnv1a64:%016llx", (unsigned long long)h);
  return text;
}

// Hashes a file as (name, size, bytes), so renaming or moving bytes between
// files changes the hash too.
uint64_t hash_file(uint64_t h, const std::string& name, const std::vector<uint8_t>& bytes) {
  h = fnv1a64(name, h);
  h = fnv1a64(std::string_view("\0", 1), h);
  h = fnv1a64(std::to_string(bytes.size()), h);
  return fnv1a64({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, h);
}

}  // namespace

Result<HfModelConfig> hf_model_config(const json& config, const std::string& name) {
  using R = Result<HfModelConfig>;
  Result<KvShape> shape = kv_shape_from_hf_config(config, name);
  if (!shape) return R::failure(shape.error());
  try {
    Fields f(config, name);
    const bool gpt2 = !config.contains("num_hidden_layers");
    const std::string model_type = f.text("model_type", gpt2 ? "gpt2" : "llama");
    if (model_type != (gpt2 ? "gpt2" : "llama")) {
      f.refuse("model_type", std::string("kvcheck reads gpt2 and llama checkpoints") +
                                 (model_type == "gpt2" || model_type == "llama"
                                      ? " and this config has the other family's field names"
                                      : ""));
    }
    mark_shape_fields(f, gpt2);
    HfModelConfig out;
    Config& c = out.config;
    const KvShape& s = shape.value();
    c.n_layers = s.n_layers;
    c.d_model = s.hidden;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.head_dim = s.head_dim;
    c.max_pos = s.max_context;
    c.vocab = f.positive("vocab_size");
    gpt2 ? read_gpt2(f, out) : read_llama(f, out);
    if (std::string error = c.validate(); !error.empty()) return R::failure(name + ": " + error);
    return out;
  } catch (const InputError& e) {
    return R::failure(e.what());
  }
}

Result<Checkpoint> load_hf_checkpoint(const std::string& folder) {
  using R = Result<Checkpoint>;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(folder, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return R::failure(folder + ": not a folder");
  }
  Result<std::vector<uint8_t>> config_bytes = read_file_bytes((dir / "config.json").string());
  if (!config_bytes) return R::failure(config_bytes.error());
  const std::string config_name = (dir / "config.json").string();
  const std::vector<uint8_t>& config_text = config_bytes.value();
  Result<json> config_json = parse_json_text(
      std::string_view(reinterpret_cast<const char*>(config_text.data()), config_text.size()),
      config_name);
  if (!config_json) return R::failure(config_json.error());
  Result<HfModelConfig> hf = hf_model_config(config_json.value(), config_name);
  if (!hf) return R::failure(hf.error());
  const Config& config = hf.value().config;

  Result<std::vector<std::string>> files = safetensors_files(dir);
  if (!files) return R::failure(files.error());
  uint64_t hash = hash_file(kFnv1a64Basis, "config.json", config_bytes.value());
  std::vector<std::vector<uint8_t>> contents;        // [file] bytes, which the tensors point into
  std::map<std::string, SafetensorsTensor> tensors;  // by full Hugging Face name
  std::map<std::string, std::string> original;       // full name -> name in the file
  for (const std::string& file : files.value()) {
    Result<std::vector<uint8_t>> bytes = read_file_bytes((dir / file).string());
    if (!bytes) return R::failure(bytes.error());
    hash = hash_file(hash, file, bytes.value());
    contents.push_back(std::move(bytes).value());
    Result<SafetensorsHeader> header = parse_safetensors_header(contents.back());
    if (!header) return R::failure((dir / file).string() + ": " + header.error());
    for (auto& [name, tensor] : header.value().tensors) {
      const std::string full = full_name(name, config.family);
      if (config.family == Family::kGpt2 && is_gpt2_buffer(full)) continue;
      if (config.family == Family::kLlama && is_rope_buffer(full)) {
        if (std::string error = check_inv_freq(name, tensor, config); !error.empty()) {
          return R::failure((dir / file).string() + ": " + error);
        }
        continue;
      }
      if (!original.emplace(full, name).second) {
        return R::failure((dir / file).string() + ": tensor \"" + name + "\" is also stored as \"" +
                          original.at(full) + "\"");
      }
      tensors.emplace(full, tensor);
    }
  }

  // Tied embeddings: save_pretrained leaves lm_head.weight out, since it is
  // the embedding matrix itself.
  const std::string embedding = hf_tensor_name(config.family, "tok_embedding");
  const std::string head = hf_tensor_name(config.family, "lm_head");
  const bool tied = hf.value().tie_word_embeddings;
  if (tied && !tensors.contains(head) && tensors.contains(embedding)) {
    tensors.emplace(head, tensors.at(embedding));
  } else if (!tied && !tensors.contains(head)) {
    return R::failure(dir.string() + ": missing tensor \"" + head +
                      "\": config.json has tie_word_embeddings false, so the head must be "
                      "stored");
  }
  Result<Weights> weights = weights_from_hf_tensors(tensors, config);
  if (!weights) {
    std::string error = weights.error();
    // Name the tensor as the file spells it.
    for (const auto& [full, name] : original) {
      const std::string quoted = "\"" + full + "\"";
      if (full != name && error.find(quoted) != std::string::npos) {
        error.replace(error.find(quoted), quoted.size(), "\"" + name + "\"");
      }
    }
    return R::failure(dir.string() + ": " + error);
  }
  if (tied && weights.value().lm_head != weights.value().tok_embedding) {
    return R::failure(dir.string() + ": tie_word_embeddings is true, but " + head +
                      " differs from " + embedding +
                      "; set tie_word_embeddings false to use the stored head");
  }
  return Checkpoint{dir.string(), hex_hash(hash), config, std::move(weights).value()};
}

}  // namespace kvcheck
