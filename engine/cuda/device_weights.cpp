// Staging and upload of a model's weights for the CUDA engine
// (device_weights.h): host tensors are packed into one vector at 64-float
// boundaries and copied in one cudaMemcpy, then each pointer is the buffer's
// base plus its offset.
#include "engine/cuda/device_weights.h"

#include <algorithm>

namespace kvcheck::cuda {
namespace {

// Collects host tensors into one staging vector, each at a 64-float (256 B)
// boundary, then uploads them with one copy.
class WeightStager {
 public:
  // Returns the tensor's offset in floats, or -1 for an empty tensor.
  long add(const std::vector<float>& tensor) {
    if (tensor.empty()) return -1;
    const size_t at = (staging_.size() + 63) / 64 * 64;
    staging_.resize(at + tensor.size(), 0.0f);
    std::copy(tensor.begin(), tensor.end(), staging_.begin() + long(at));
    return long(at);
  }
  // Q, K and V fused, like the CPU's packed wqkv.
  long add_concat(const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& c) {
    std::vector<float> joined;
    joined.reserve(a.size() + b.size() + c.size());
    joined.insert(joined.end(), a.begin(), a.end());
    joined.insert(joined.end(), b.begin(), b.end());
    joined.insert(joined.end(), c.begin(), c.end());
    return add(joined);
  }
  const std::vector<float>& staging() const { return staging_; }

 private:
  std::vector<float> staging_;  // [floats] every tensor, 64-float aligned
};

struct LayerOffsets {
  long attn_norm, attn_norm_bias, wqkv, bqkv, wo, bo, mlp_norm, mlp_norm_bias, w_up, b_up, w_gate,
      w_down, b_down;
};

LayerOffsets stage_layer(const Config& config, const LayerWeights& lw, WeightStager& stager) {
  LayerOffsets o;
  o.attn_norm = stager.add(lw.attn_norm);
  o.attn_norm_bias = stager.add(lw.attn_norm_bias);
  o.wqkv = stager.add_concat(lw.wq, lw.wk, lw.wv);
  o.bqkv = config.qkv_bias ? stager.add_concat(lw.bq, lw.bk, lw.bv) : -1;
  o.wo = stager.add(lw.wo);
  o.bo = stager.add(lw.bo);
  o.mlp_norm = stager.add(lw.mlp_norm);
  o.mlp_norm_bias = stager.add(lw.mlp_norm_bias);
  o.w_up = stager.add(lw.w_up);
  o.b_up = stager.add(lw.b_up);
  o.w_gate = stager.add(lw.w_gate);
  o.w_down = stager.add(lw.w_down);
  o.b_down = stager.add(lw.b_down);
  return o;
}

}  // namespace

void upload_weights(const Config& config, const Weights& w, DeviceWeights& device) {
  WeightStager stager;
  const long tok = stager.add(w.tok_embedding);
  const long pos = stager.add(w.pos_embedding);
  const long fnorm = stager.add(w.final_norm);
  const long fnorm_bias = stager.add(w.final_norm_bias);
  const long lm = stager.add(w.lm_head);
  std::vector<LayerOffsets> offsets;  // [L]
  for (const LayerWeights& lw : w.layers) offsets.push_back(stage_layer(config, lw, stager));
  const std::vector<float>& staging = stager.staging();
  device.buffer.allocate(staging.size() * sizeof(float), "weights");
  KVCHECK_CUDA_CHECK(cudaMemcpy(device.buffer.get(), staging.data(), staging.size() * sizeof(float),
                                cudaMemcpyHostToDevice));
  const auto at = [&](long offset) -> const float* {
    return offset < 0 ? nullptr : device.buffer.as<float>() + offset;
  };
  device.tok_embedding = at(tok), device.pos_embedding = at(pos);
  device.final_norm = at(fnorm), device.final_norm_bias = at(fnorm_bias), device.lm_head = at(lm);
  device.layers.clear();
  for (const LayerOffsets& o : offsets) {
    DeviceLayer& l = device.layers.emplace_back();
    l.attn_norm = at(o.attn_norm), l.attn_norm_bias = at(o.attn_norm_bias);
    l.wqkv = at(o.wqkv), l.bqkv = at(o.bqkv), l.wo = at(o.wo), l.bo = at(o.bo);
    l.mlp_norm = at(o.mlp_norm), l.mlp_norm_bias = at(o.mlp_norm_bias);
    l.w_up = at(o.w_up), l.b_up = at(o.b_up), l.w_gate = at(o.w_gate);
    l.w_down = at(o.w_down), l.b_down = at(o.b_down);
  }
}

}  // namespace kvcheck::cuda
