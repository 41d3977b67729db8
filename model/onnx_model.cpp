// The graph of model/onnx_model.h, node by node. One builder names every
// intermediate tensor; weights are stored as initializers in the layout ONNX's
// MatMul wants ([in][out], the nn.Linear matrix transposed: no arithmetic).
#include "model/onnx_model.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <string_view>

#include "model/atomic_file.h"
#include "model/config_json.h"
#include "oracle/ops.h"

namespace kvcheck {

namespace {

constexpr int64_t kIrVersion = 8;
constexpr int64_t kOnnxOpset = 17;  // the newest Debian's python3-onnx 1.12 knows
constexpr int64_t kMsOpset = 1;
constexpr const char* kMs = "com.microsoft";

// Adds nodes and initializers to one graph; every intermediate gets a fresh name.
class Builder {
 public:
  explicit Builder(onnx::GraphProto* graph) : graph_(graph) {}

  // One node with one output; returns the output's name.
  std::string op(std::string_view type, const std::vector<std::string>& inputs,
                 std::string_view domain = "") {
    return op_n(type, inputs, 1, domain).front();
  }
  std::vector<std::string> op_n(std::string_view type, const std::vector<std::string>& inputs,
                                int outputs, std::string_view domain = "") {
    node_ = graph_->add_node();
    node_->set_op_type(std::string(type));
    node_->set_name(std::string(type) + "_" + std::to_string(++count_));
    if (!domain.empty()) node_->set_domain(std::string(domain));
    for (const std::string& in : inputs) node_->add_input(in);
    std::vector<std::string> names;
    for (int i = 0; i < outputs; ++i) {
      names.push_back(node_->name() + "_out" + std::to_string(i));
      node_->add_output(names.back());
    }
    return names;
  }
  // Renames the last node's output `i` (a graph output).
  void name_output(int i, const std::string& name) { node_->set_output(i, name); }
  void attr(std::string_view name, int64_t value) {
    onnx::AttributeProto* a = node_->add_attribute();
    a->set_name(std::string(name));
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  void attr(std::string_view name, float value) {
    onnx::AttributeProto* a = node_->add_attribute();
    a->set_name(std::string(name));
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  // An f32 initializer of the given shape; returns its name.
  std::string weight(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<float>& data) {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4));
    return name;
  }
  // A linear map's [out][in] matrix stored as [in][out] for MatMul.
  std::string linear(const std::string& name, const std::vector<float>& w, int out, int in) {
    std::vector<float> t(w.size());  // [in][out]
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i)
        t[static_cast<size_t>(i) * out + o] = w[static_cast<size_t>(o) * in + i];
    return weight(name, {in, out}, t);
  }
  // x W^T (+ b).
  std::string project(const std::string& x, const std::string& name, const std::vector<float>& w,
                      const std::vector<float>& b, int out, int in) {
    std::string y = op("MatMul", {x, linear(name, w, out, in)});
    if (!b.empty()) y = op("Add", {y, weight(name + ".bias", {out}, b)});
    return y;
  }
  void value(bool input, const std::string& name, int type, const std::vector<std::string>& dims) {
    onnx::ValueInfoProto* v = input ? graph_->add_input() : graph_->add_output();
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    onnx::TensorShapeProto* shape = t->mutable_shape();
    for (const std::string& d : dims) {
      onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
      if (!d.empty() && d[0] >= '0' && d[0] <= '9')
        dim->set_dim_value(std::stoll(d));
      else
        dim->set_dim_param(d);
    }
  }

 private:
  onnx::GraphProto* graph_;
  onnx::NodeProto* node_ = nullptr;
  int count_ = 0;
};

std::string layer_name(int l, std::string_view what) {
  return "layers." + std::to_string(l) + "." + std::string(what);
}

// The pre-attention or pre-MLP norm of the family.
std::string norm(Builder& b, const Config& c, const std::string& x, const std::string& name,
                 const std::vector<float>& gain, const std::vector<float>& bias) {
  const std::vector<int64_t> shape = {c.d_model};
  if (c.family == Family::kLlama) {
    std::string y = b.op("SimplifiedLayerNormalization", {x, b.weight(name, shape, gain)});
    b.attr("axis", int64_t{-1});
    b.attr("epsilon", static_cast<float>(c.norm_eps));
    return y;
  }
  std::string y = b.op("LayerNormalization",
                       {x, b.weight(name, shape, gain), b.weight(name + ".bias", shape, bias)});
  b.attr("axis", int64_t{-1});
  b.attr("epsilon", static_cast<float>(c.norm_eps));
  return y;
}

// RoPE's cos and sin at every position: the oracle's angles, rounded to float.
void rotary_cache(Builder& b, const Config& c) {
  const int half = c.head_dim / 2;
  std::vector<float> cos_cache(static_cast<size_t>(c.max_pos) * half);  // [max_pos][D/2]
  std::vector<float> sin_cache(cos_cache.size());                       // [max_pos][D/2]
  std::vector<double> cos(half), sin(half);
  for (int p = 0; p < c.max_pos; ++p) {
    oracle::rope_cos_sin(p, c.rope_theta, cos, sin);
    for (int i = 0; i < half; ++i) {
      cos_cache[static_cast<size_t>(p) * half + i] = static_cast<float>(cos[i]);
      sin_cache[static_cast<size_t>(p) * half + i] = static_cast<float>(sin[i]);
    }
  }
  b.weight("cos_cache", {c.max_pos, half}, cos_cache);
  b.weight("sin_cache", {c.max_pos, half}, sin_cache);
}

// Q, K and V of one layer: three projections, or one into Q|K|V (packed).
std::vector<std::string> qkv(Builder& b, const Config& c, const LayerWeights& w, int l,
                             const std::string& h, bool packed) {
  const int e = c.d_model;
  if (!packed) {
    return {b.project(h, layer_name(l, "wq"), w.wq, w.bq, c.q_width(), e),
            b.project(h, layer_name(l, "wk"), w.wk, w.bk, c.kv_width(), e),
            b.project(h, layer_name(l, "wv"), w.wv, w.bv, c.kv_width(), e)};
  }
  std::vector<float> weight = w.wq;  // [(H + 2 KVH) D][E]: the rows of wq, wk, wv
  weight.insert(weight.end(), w.wk.begin(), w.wk.end());
  weight.insert(weight.end(), w.wv.begin(), w.wv.end());
  std::vector<float> bias = w.bq;  // [(H + 2 KVH) D] or empty
  bias.insert(bias.end(), w.bk.begin(), w.bk.end());
  bias.insert(bias.end(), w.bv.begin(), w.bv.end());
  const int width = c.q_width() + 2 * c.kv_width();
  return {b.project(h, layer_name(l, "wqkv"), weight, bias, width, e), "", ""};
}

// One layer's attention: projections, GroupQueryAttention with past/present, out-projection.
std::string attention(Builder& b, const Config& c, const LayerWeights& w, int l,
                      const std::string& h, bool packed) {
  const std::vector<std::string> q_k_v = qkv(b, c, w, l, h, packed);
  const std::string past = "past_key_values." + std::to_string(l);
  std::vector<std::string> inputs = {q_k_v[0],
                                     q_k_v[1],
                                     q_k_v[2],
                                     past + ".key",
                                     past + ".value",
                                     "seqlens_k",
                                     "total_sequence_length"};
  if (c.family == Family::kLlama) {
    inputs.push_back("cos_cache");
    inputs.push_back("sin_cache");
  }
  const std::vector<std::string> out = b.op_n("GroupQueryAttention", inputs, 3, kMs);
  const std::string present = "present." + std::to_string(l);
  b.name_output(1, present + ".key");
  b.name_output(2, present + ".value");
  b.attr("num_heads", int64_t{c.n_heads});
  b.attr("kv_num_heads", int64_t{c.n_kv_heads});
  if (c.family == Family::kLlama) {
    b.attr("do_rotary", int64_t{1});
    b.attr("rotary_interleaved", int64_t{0});
  }
  if (c.windowed(l)) b.attr("local_window_size", int64_t{onnx_local_window(c.sliding_window)});
  return b.project(out[0], layer_name(l, "wo"), w.wo, w.bo, c.d_model, c.q_width());
}

std::string mlp(Builder& b, const Config& c, const LayerWeights& w, int l, const std::string& h) {
  const int e = c.d_model, f = c.d_ff;
  const std::string up = b.project(h, layer_name(l, "w_up"), w.w_up, w.b_up, f, e);
  std::string act;
  if (c.family == Family::kLlama) {
    const std::string gate = b.project(h, layer_name(l, "w_gate"), w.w_gate, {}, f, e);
    const std::string silu = b.op("Mul", {gate, b.op("Sigmoid", {gate})});
    act = b.op("Mul", {silu, up});
  } else {
    act = b.op("FastGelu", {up}, kMs);
  }
  return b.project(act, layer_name(l, "w_down"), w.w_down, w.b_down, e, f);
}

void declare_io(Builder& b, const Config& c) {
  using T = onnx::TensorProto;
  b.value(true, "input_ids", T::INT64, {"batch", "sequence"});
  if (c.family == Family::kGpt2) b.value(true, "position_ids", T::INT64, {"batch", "sequence"});
  b.value(true, "seqlens_k", T::INT32, {"batch"});
  b.value(true, "total_sequence_length", T::INT32, {});
  const std::string kvh = std::to_string(c.n_kv_heads), d = std::to_string(c.head_dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string past = "past_key_values." + std::to_string(l);
    b.value(true, past + ".key", T::FLOAT, {"batch", kvh, "past_sequence", d});
    b.value(true, past + ".value", T::FLOAT, {"batch", kvh, "past_sequence", d});
  }
  b.value(false, "logits", T::FLOAT, {"batch", "sequence", std::to_string(c.vocab)});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string present = "present." + std::to_string(l);
    b.value(false, present + ".key", T::FLOAT, {"batch", kvh, "total_sequence", d});
    b.value(false, present + ".value", T::FLOAT, {"batch", kvh, "total_sequence", d});
  }
}

void build_graph(onnx::GraphProto* graph, const Config& c, const Weights& w, bool packed) {
  Builder b(graph);
  graph->set_name("kvcheck_" + std::string(family_name(c.family)));
  declare_io(b, c);
  const int e = c.d_model;
  std::string x =
      b.op("Gather", {b.weight("tok_embedding", {c.vocab, e}, w.tok_embedding), "input_ids"});
  if (c.family == Family::kGpt2) {
    x = b.op("Add", {x, b.op("Gather", {b.weight("pos_embedding", {c.max_pos, e}, w.pos_embedding),
                                        "position_ids"})});
  } else {
    rotary_cache(b, c);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string h =
        norm(b, c, x, layer_name(l, "attn_norm"), lw.attn_norm, lw.attn_norm_bias);
    x = b.op("Add", {x, attention(b, c, lw, l, h, packed)});
    const std::string h2 = norm(b, c, x, layer_name(l, "mlp_norm"), lw.mlp_norm, lw.mlp_norm_bias);
    x = b.op("Add", {x, mlp(b, c, lw, l, h2)});
  }
  const std::string h = norm(b, c, x, "final_norm", w.final_norm, w.final_norm_bias);
  b.op("MatMul", {h, b.linear("lm_head", w.lm_head, c.vocab, e)});
  b.name_output(0, "logits");
}

}  // namespace

std::string onnx_unsupported(const Config& config) {
  // CPU GroupQueryAttention (group_query_attention_helper.h): head_size a
  // multiple of 8, and of 16 where a rotary cache is given.
  const int multiple = config.family == Family::kLlama ? 16 : 8;
  if (config.head_dim % multiple != 0) {
    return "head_dim " + std::to_string(config.head_dim) + " is not a multiple of " +
           std::to_string(multiple) + " (GroupQueryAttention" +
           (multiple == 16 ? " with its rotary cache)" : ")");
  }
  return {};
}

int onnx_local_window(int sliding_window) {
  return sliding_window;
}

std::vector<uint8_t> save_onnx(const Config& config, const Weights& weights,
                               const OnnxOptions& options) {
  if (const std::string error = config.validate(); !error.empty())
    throw InputError("invalid config: " + error);
  if (const std::string error = check_shapes(config, weights); !error.empty())
    throw InputError(error);
  if (const std::string why = onnx_unsupported(config); !why.empty())
    throw InputError("no ONNX graph for this config: " + why);
  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("kvcheck-export");
  onnx::OperatorSetIdProto* onnx_domain = model.add_opset_import();
  onnx_domain->set_domain("");
  onnx_domain->set_version(kOnnxOpset);
  onnx_domain = model.add_opset_import();
  onnx_domain->set_domain(kMs);
  onnx_domain->set_version(kMsOpset);
  onnx::StringStringEntryProto* meta = model.add_metadata_props();
  meta->set_key("kvcheck.config");
  meta->set_value(config_to_json(config).dump());
  build_graph(model.mutable_graph(), config, weights, options.packed_qkv);
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw InputError("the ONNX model did not serialize");
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::string save_onnx_file(const std::string& path, const Config& config, const Weights& weights,
                           const OnnxOptions& options) {
  return write_file_atomically_from(path, [&] { return save_onnx(config, weights, options); });
}

}  // namespace kvcheck
