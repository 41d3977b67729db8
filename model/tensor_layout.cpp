#include "model/tensor_layout.h"

#include <map>
#include <optional>
#include <string_view>

namespace kvcheck {

namespace {

// Each canonical tensor's Hugging Face and GGUF names. `conv1d` marks GPT-2's
// Conv1D in the Hugging Face file, which stores [in][out], the transpose of
// canonical [out][in]; GGUF always stores [out][in] (ggml's ne = {in, out}).
// `rope` marks q/k rows that GGUF holds in RoPE NORM (adjacent pair) order.
struct NameRule {
  std::string_view canonical;  // name, or suffix after "layers.N."
  std::string_view hf;         // name, or suffix after the family's layer prefix
  std::string_view gguf;       // name, or suffix after "blk.N."
  bool conv1d;
  bool rope;
};

constexpr NameRule kLlamaTop[] = {
    {"tok_embedding", "model.embed_tokens.weight", "token_embd.weight", false, false},
    {"final_norm", "model.norm.weight", "output_norm.weight", false, false},
    {"lm_head", "lm_head.weight", "output.weight", false, false},
};
constexpr NameRule kLlamaLayer[] = {
    {"attn_norm", "input_layernorm.weight", "attn_norm.weight", false, false},
    {"wq", "self_attn.q_proj.weight", "attn_q.weight", false, true},
    {"wk", "self_attn.k_proj.weight", "attn_k.weight", false, true},
    {"wv", "self_attn.v_proj.weight", "attn_v.weight", false, false},
    {"wo", "self_attn.o_proj.weight", "attn_output.weight", false, false},
    {"mlp_norm", "post_attention_layernorm.weight", "ffn_norm.weight", false, false},
    {"w_gate", "mlp.gate_proj.weight", "ffn_gate.weight", false, false},
    {"w_up", "mlp.up_proj.weight", "ffn_up.weight", false, false},
    {"w_down", "mlp.down_proj.weight", "ffn_down.weight", false, false},
};
constexpr NameRule kGpt2Top[] = {
    {"tok_embedding", "transformer.wte.weight", "token_embd.weight", false, false},
    {"pos_embedding", "transformer.wpe.weight", "position_embd.weight", false, false},
    {"final_norm", "transformer.ln_f.weight", "output_norm.weight", false, false},
    {"final_norm_bias", "transformer.ln_f.bias", "output_norm.bias", false, false},
    {"lm_head", "lm_head.weight", "output.weight", false, false},
};
constexpr NameRule kGpt2Layer[] = {
    {"attn_norm", "ln_1.weight", "attn_norm.weight", false, false},
    {"attn_norm_bias", "ln_1.bias", "attn_norm.bias", false, false},
    {"wq", "attn.c_attn.weight", "attn_qkv.weight", true, false},
    {"wk", "attn.c_attn.weight", "attn_qkv.weight", true, false},
    {"wv", "attn.c_attn.weight", "attn_qkv.weight", true, false},
    {"bq", "attn.c_attn.bias", "attn_qkv.bias", false, false},
    {"bk", "attn.c_attn.bias", "attn_qkv.bias", false, false},
    {"bv", "attn.c_attn.bias", "attn_qkv.bias", false, false},
    {"wo", "attn.c_proj.weight", "attn_output.weight", true, false},
    {"bo", "attn.c_proj.bias", "attn_output.bias", false, false},
    {"mlp_norm", "ln_2.weight", "ffn_norm.weight", false, false},
    {"mlp_norm_bias", "ln_2.bias", "ffn_norm.bias", false, false},
    {"w_up", "mlp.c_fc.weight", "ffn_up.weight", true, false},
    {"b_up", "mlp.c_fc.bias", "ffn_up.bias", false, false},
    {"w_down", "mlp.c_proj.weight", "ffn_down.weight", true, false},
    {"b_down", "mlp.c_proj.bias", "ffn_down.bias", false, false},
};

struct Placement {
  std::string name;
  bool conv1d;
  bool rope;
};

template <size_t N>
std::optional<Placement> find_rule(const NameRule (&rules)[N], FileFormat format,
                                   std::string_view canonical, const std::string& prefix) {
  for (const NameRule& rule : rules) {
    if (rule.canonical != canonical) continue;
    if (format == FileFormat::kGguf)
      return Placement{prefix + std::string(rule.gguf), false, rule.rope};
    return Placement{prefix + std::string(rule.hf), rule.conv1d, false};
  }
  return std::nullopt;
}

std::optional<Placement> placement(FileFormat format, Family family, std::string_view canonical) {
  const bool gpt2 = family == Family::kGpt2;
  constexpr std::string_view kLayers = "layers.";
  if (!canonical.starts_with(kLayers)) {
    return gpt2 ? find_rule(kGpt2Top, format, canonical, "")
                : find_rule(kLlamaTop, format, canonical, "");
  }
  const std::string_view rest = canonical.substr(kLayers.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string layer(rest.substr(0, dot));
  const std::string_view suffix = rest.substr(dot + 1);
  std::string prefix;
  if (format == FileFormat::kGguf) {
    prefix = "blk." + layer + ".";
  } else {
    prefix = gpt2 ? "transformer.h." + layer + "." : "model.layers." + layer + ".";
  }
  return gpt2 ? find_rule(kGpt2Layer, format, suffix, prefix)
              : find_rule(kLlamaLayer, format, suffix, prefix);
}

// Output index within the file tensor of canonical row `row` of `part`.
int64_t file_row(const LayoutPart& part, int64_t row) {
  if (part.rope_block == 0) return part.out_offset + row;
  const int64_t half = part.rope_block / 2;
  const int64_t head = row / part.rope_block, within = row % part.rope_block;
  const int64_t pair = within % half, which = within / half;  // row = which*half + pair
  return part.out_offset + head * part.rope_block + 2 * pair + which;
}

// Index of canonical element (row, col) of `part` within the file tensor's
// row-major storage.
int64_t file_index(const LayoutTensor& tensor, const LayoutPart& part, int64_t row, int64_t col) {
  const int64_t out = file_row(part, row);
  return tensor.conv1d ? col * tensor.out + out : out * tensor.in + col;
}

}  // namespace

std::string hf_tensor_name(Family family, std::string_view canonical) {
  const std::optional<Placement> place = placement(FileFormat::kHuggingFace, family, canonical);
  return place ? place->name : std::string();
}

Result<std::vector<LayoutTensor>> file_layout(FileFormat format, const Config& config,
                                              const std::vector<TensorView>& canonical) {
  using R = Result<std::vector<LayoutTensor>>;
  const char* format_name = format == FileFormat::kGguf ? "GGUF" : "Hugging Face";
  std::vector<LayoutTensor> layout;
  std::map<std::string, size_t> index_of;
  for (size_t c = 0; c < canonical.size(); ++c) {
    const TensorView& view = canonical[c];
    const std::optional<Placement> place = placement(format, config.family, view.name);
    if (!place) {
      return R::failure(std::string("internal: no ") + format_name + " name for \"" + view.name +
                        "\"");
    }
    const size_t rank = view.shape.size();
    const int64_t in = rank == 2 ? view.shape[1] : 1;
    const auto [it, inserted] = index_of.try_emplace(place->name, layout.size());
    if (inserted) layout.push_back({place->name, place->conv1d, rank, in, 0, {}, {}});
    LayoutTensor& tensor = layout[it->second];
    if ((rank != 1 && rank != 2) || tensor.rank != rank || tensor.in != in ||
        tensor.conv1d != place->conv1d) {
      return R::failure("internal: \"" + view.name + "\" cannot be fused into \"" + tensor.name +
                        "\"");
    }
    const int64_t rope_block = place->rope ? config.head_dim : 0;
    if (rope_block != 0 && (rope_block % 2 != 0 || view.shape[0] % rope_block != 0)) {
      return R::failure("internal: \"" + view.name + "\" rows are not whole heads of even size");
    }
    tensor.parts.push_back({c, tensor.out, view.shape[0], rope_block});
    tensor.out += view.shape[0];
  }
  for (LayoutTensor& tensor : layout) {
    if (tensor.rank == 1) {
      tensor.shape = {tensor.out};
    } else {
      tensor.shape = tensor.conv1d ? std::vector<int64_t>{tensor.in, tensor.out}
                                   : std::vector<int64_t>{tensor.out, tensor.in};
    }
  }
  return layout;
}

void pack(const LayoutTensor& tensor, const std::vector<TensorView>& canonical,
          std::span<float> values) {
  for (const LayoutPart& part : tensor.parts) {
    const std::vector<float>& src = *canonical[part.canonical].data;  // [rows][tensor.in]
    for (int64_t row = 0; row < part.rows; ++row) {
      for (int64_t col = 0; col < tensor.in; ++col) {
        values[static_cast<size_t>(file_index(tensor, part, row, col))] =
            src[static_cast<size_t>(row * tensor.in + col)];
      }
    }
  }
}

void unpack(const LayoutTensor& tensor, std::span<const float> values,
            const std::vector<TensorRef>& canonical) {
  for (const LayoutPart& part : tensor.parts) {
    std::vector<float>& dst = *canonical[part.canonical].data;  // [rows][tensor.in]
    for (int64_t row = 0; row < part.rows; ++row) {
      for (int64_t col = 0; col < tensor.in; ++col) {
        dst[static_cast<size_t>(row * tensor.in + col)] =
            values[static_cast<size_t>(file_index(tensor, part, row, col))];
      }
    }
  }
}

}  // namespace kvcheck
