// The table of named arithmetics (arithmetic_presets.h says why it exists).
// Read in llama.cpp's bundled source (ggml/src/ggml-cpu/ops.cpp,
// ggml_compute_forward_flash_attn_ext_f16_one_chunk; vec.h's f16 helpers)
// and in adapters/torch/engine.py's --dtype bf16 path.
#include "engine/arithmetic_presets.h"

namespace kvcheck {

namespace {

ArithmeticTraits ggml_base() {
  ArithmeticTraits a;
  a.rope_angles_in_float = true;  // rope_f32: theta_scale^i * pos in float
  return a;
}

std::vector<ArithmeticPreset> make_presets() {
  std::vector<ArithmeticPreset> out;
  out.push_back({"f32", "the in-tree engines, ONNX Runtime's f32 graph", {}});
  out.push_back({"ggml-f32", "llama.cpp, f32 K/V, flash attention off", ggml_base()});
  ArithmeticTraits f16 = ggml_base();
  f16.queries_rounded_to_kv_dtype = true;        // mul_mat converts q to K's f16
  f16.probabilities_rounded_to_kv_dtype = true;  // and the probabilities to V's
  out.push_back({"ggml-f16", "llama.cpp, f16 K/V, flash attention off", f16});
  ArithmeticTraits flash = ggml_base();
  flash.queries_rounded_to_kv_dtype = true;  // q_to_vec_dot
  flash.kv_read = Precision::kF16;           // an f32 cache is cast to f16 first
  flash.online_softmax = true;
  flash.value_accumulation = Precision::kF16;  // VKQ16, ggml_vec_mad_f16
  out.push_back({"ggml-flash-f16", "llama.cpp, f16 or f32 K/V, flash attention on", flash});
  ArithmeticTraits q8 = ggml_base();
  q8.queries_rounded_to_kv_dtype = true;  // q quantized to q8_0 blocks
  q8.online_softmax = true;               // V dequantized to f32: VKQ32
  q8.kv_quantizer = KvQuantizer::kGgml;
  out.push_back({"ggml-flash-q8_0", "llama.cpp, q8_0 K/V, flash attention on", q8});
  ArithmeticTraits flash_bf16 = ggml_base();
  flash_bf16.queries_rounded_to_kv_dtype = true;  // q to bf16, K's vec_dot_type
  flash_bf16.online_softmax = true;               // V widened to f32: VKQ32
  out.push_back({"ggml-flash-bf16", "llama.cpp, bf16 K/V, flash attention on", flash_bf16});
  // K in the cache's type, V in q8_0 (--kv-k f16 --kv-v q8_0): V's own type.
  ArithmeticTraits v_q8 = q8;
  v_q8.v_dtype = KvDtype::kQ8_0;
  out.push_back(
      {"ggml-flash-v-q8_0", "llama.cpp, flash attention on, V q8_0 and K the cache's type", v_q8});
  // V in q5_1 (--kv-v q5_1): its minimum and range-sized scale.
  ArithmeticTraits v_q5_1 = q8;
  v_q5_1.v_dtype = KvDtype::kQ5_1;
  out.push_back({"ggml-flash-v-q5_1",
                 "llama.cpp, flash attention on, V q5_1 and K the cache's type", v_q5_1});
  ArithmeticTraits bf16;
  bf16.activations = Precision::kBF16;
  bf16.weights = Precision::kBF16;
  out.push_back(
      {"torch-bf16", "PyTorch, model.to(torch.bfloat16) (adapters/torch --dtype bf16)", bf16});
  return out;
}

}  // namespace

const std::vector<ArithmeticPreset>& arithmetic_presets() {
  static const std::vector<ArithmeticPreset> presets = make_presets();
  return presets;
}

std::optional<ArithmeticTraits> find_arithmetic_preset(std::string_view name) {
  for (const ArithmeticPreset& p : arithmetic_presets()) {
    if (name == p.name) return p.arithmetic;
  }
  return std::nullopt;
}

std::string arithmetic_preset_names() {
  std::string out;
  for (const ArithmeticPreset& p : arithmetic_presets())
    out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace kvcheck
