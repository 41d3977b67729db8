// save_onnx read back with ONNX's own protobuf classes: the graph's inputs and
// outputs, one GroupQueryAttention per layer with the attributes the config
// implies (the window only on windowed layers), weights that are the
// nn.Linear matrices transposed bit for bit, and the refusals. Whether ONNX
// Runtime computes the model right is tests/real_engines (it needs Node).
#include "model/onnx_model.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/status.h"

namespace kvcheck {
namespace {

onnx::ModelProto parse(const std::vector<uint8_t>& bytes) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  return model;
}

Config windowed_llama() {
  Config c = llama_tiny();
  c.head_dim = 16;
  c.n_kv_heads = 2;
  c.n_layers = 4;
  c.sliding_window = 5;
  c.sliding_window_pattern = 2;  // layers 0, 2 windowed; 1, 3 global
  return c;
}

std::map<std::string, int64_t> int_attributes(const onnx::NodeProto& node) {
  std::map<std::string, int64_t> out;
  for (const onnx::AttributeProto& a : node.attribute())
    if (a.type() == onnx::AttributeProto::INT) out[a.name()] = a.i();
  return out;
}

TEST(OnnxModel, GraphHasGenaiInputsAndOneAttentionPerLayer) {
  const Config c = windowed_llama();
  const onnx::ModelProto model = parse(save_onnx(c, init_weights(c, 3)));
  std::vector<std::string> inputs, outputs;
  for (const auto& v : model.graph().input()) inputs.push_back(v.name());
  for (const auto& v : model.graph().output()) outputs.push_back(v.name());
  EXPECT_EQ(inputs.front(), "input_ids");
  EXPECT_EQ(inputs.size(), 3u + 2u * c.n_layers);
  EXPECT_EQ(inputs.back(), "past_key_values.3.value");
  EXPECT_EQ(outputs.front(), "logits");
  EXPECT_EQ(outputs.back(), "present.3.value");
  std::vector<std::map<std::string, int64_t>> attention;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() != "GroupQueryAttention") continue;
    EXPECT_EQ(node.domain(), "com.microsoft");
    EXPECT_EQ(node.input_size(), 9);  // q, k, v, past k/v, seqlens_k, total, cos, sin
    attention.push_back(int_attributes(node));
  }
  ASSERT_EQ(attention.size(), static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& a = attention[static_cast<size_t>(l)];
    EXPECT_EQ(a.at("num_heads"), c.n_heads);
    EXPECT_EQ(a.at("kv_num_heads"), c.n_kv_heads);
    EXPECT_EQ(a.at("do_rotary"), 1);
    EXPECT_EQ(a.count("local_window_size"), c.windowed(l) ? 1u : 0u) << "layer " << l;
    if (c.windowed(l)) {
      EXPECT_EQ(a.at("local_window_size"), onnx_local_window(c.sliding_window));
    }
  }
  EXPECT_EQ(onnx_local_window(5), 5);  // measured on ONNX Runtime 1.30 (docs/ONNXRUNTIME.md)
}

TEST(OnnxModel, ProjectionsAreTheLinearMatricesTransposed) {
  const Config c = windowed_llama();
  const Weights w = init_weights(c, 3);
  const onnx::ModelProto model = parse(save_onnx(c, w));
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.name() != "layers.1.wk") continue;
    ASSERT_EQ(t.dims_size(), 2);
    EXPECT_EQ(t.dims(0), c.d_model);
    EXPECT_EQ(t.dims(1), c.kv_width());
    std::vector<float> stored(static_cast<size_t>(c.d_model) * c.kv_width());  // [in][out]
    ASSERT_EQ(t.raw_data().size(), stored.size() * 4);
    std::memcpy(stored.data(), t.raw_data().data(), t.raw_data().size());
    for (int o = 0; o < c.kv_width(); ++o)
      for (int i = 0; i < c.d_model; ++i)
        ASSERT_EQ(stored[static_cast<size_t>(i) * c.kv_width() + o],
                  w.layers[1].wk[static_cast<size_t>(o) * c.d_model + i]);
    return;
  }
  FAIL() << "no initializer layers.1.wk";
}

TEST(OnnxModel, PackedQkvFeedsOneProjectionToTheOperator) {
  const Config c = windowed_llama();
  const onnx::ModelProto model = parse(save_onnx(c, init_weights(c, 3), {.packed_qkv = true}));
  int attention = 0;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() != "GroupQueryAttention") continue;
    ++attention;
    EXPECT_EQ(node.input(1), "");  // key and value absent: the packed path
    EXPECT_EQ(node.input(2), "");
  }
  EXPECT_EQ(attention, c.n_layers);
  bool found = false;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.name() != "layers.0.wqkv") continue;
    found = true;
    EXPECT_EQ(t.dims(1), c.q_width() + 2 * c.kv_width());
  }
  EXPECT_TRUE(found);
}

TEST(OnnxModel, RefusesHeadSizesTheKernelRefuses) {
  Config llama = llama_tiny();  // head_dim 8: the rotary cache needs 16s
  EXPECT_NE(onnx_unsupported(llama).find("head_dim 8 is not a multiple of 16"), std::string::npos);
  EXPECT_THROW(save_onnx(llama, init_weights(llama, 1)), InputError);
  Config gpt2 = gpt2_tiny();  // head_dim 8, no rotary: accepted
  EXPECT_EQ(onnx_unsupported(gpt2), "");
  gpt2.head_dim = 4;
  EXPECT_NE(onnx_unsupported(gpt2).find("not a multiple of 8"), std::string::npos);
}

}  // namespace
}  // namespace kvcheck
