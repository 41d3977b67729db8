// ONNX writer: a config's weights as the graph onnxruntime-genai runs on CPUs,
// attention through ONNX Runtime's GroupQueryAttention contrib operator,
// which keeps the KV cache (past in, present out), so that ONNX Runtime can
// run exactly the model the harness runs (adapters/onnxruntime,
// docs/ONNXRUNTIME.md). Written with ONNX's own protobuf schema (Debian's
// libonnx-dev), never by hand; built only where that library is found.
//
// Inputs:  input_ids int64 [B][S], seqlens_k int32 [B] (each row's total
//          length - 1), total_sequence_length int32 [] (the batch's largest
//          total), past_key_values.L.key / .value f32 [B][KVH][P][D];
//          gpt2 also position_ids int64 [B][S].
// Outputs: logits f32 [B][S][V], present.L.key / .value f32 [B][KVH][T][D].
// llama: RoPE inside the operator (do_rotary, rotate-half, a cos/sin cache of
// max_pos rows: the oracle's double angles rounded to float); a windowed layer
// sets local_window_size (onnx_local_window). gpt2: learned positions, no
// rotary, LayerNormalization and com.microsoft FastGelu. With packed QKV
// (OnnxOptions) one MatMul projects Q|K|V into the operator's `query` and
// its `key`/`value` inputs are absent, the operator's packed path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// Empty when ONNX Runtime's CPU GroupQueryAttention accepts this config's
// shapes; otherwise why not, naming the field (head_dim a multiple of 16 for
// the rotary cache, of 8 without it).
std::string onnx_unsupported(const Config& config);

// The local_window_size attribute of a windowed layer with kvcheck's window
// W (a token sees positions p - W < q <= p): W itself in ONNX Runtime 1.30's
// CPU kernel, measured (docs/ONNXRUNTIME.md, "Sliding window"; older kernels
// let a token see local_window_size + 1 positions).
int onnx_local_window(int sliding_window);

struct OnnxOptions {
  bool packed_qkv = false;  // one [E][(H + 2 KVH) D] projection into `query`
};

// The serialized ModelProto. Throws InputError when the config does not
// validate, the weights lack its shapes, or onnx_unsupported says why not.
std::vector<uint8_t> save_onnx(const Config& config, const Weights& weights,
                               const OnnxOptions& options = {});

// Atomic (write_file_atomically). Empty on success, else a message naming the path.
std::string save_onnx_file(const std::string& path, const Config& config, const Weights& weights,
                           const OnnxOptions& options = {});

}  // namespace kvcheck
