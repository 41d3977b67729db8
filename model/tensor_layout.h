// Where each canonical tensor lives in an outside file format: Hugging Face
// safetensors (LlamaForCausalLM, GPT2LMHeadModel) or llama.cpp's GGUF. One
// name table serves both, so a tensor added to the canonical table gets both
// names in one place. See docs/WEIGHTS.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck {

enum class FileFormat { kHuggingFace, kGguf };

// One canonical tensor's place inside a file tensor: canonical rows [0, rows)
// are file output indices [out_offset, out_offset + rows). With rope_block > 0
// the rows are reordered inside each block of rope_block rows (one head):
// canonical row j*(D/2) + i, the rotate-half layout, goes to row 2*i + j, the
// adjacent-pair layout of llama.cpp's RoPE NORM mode. This is the permutation
// Hugging Face's GGUF converter applies to q_proj and k_proj.
struct LayoutPart {
  size_t canonical;    // index into tensor_views / tensor_table order
  int64_t out_offset;  // first output index within the file tensor
  int64_t rows;        // canonical out dimension
  int64_t rope_block;  // head_dim for permuted q/k rows, else 0
};

// One tensor of the file. Canonical tensors that map to the same file name
// are fused along the output dimension in table order (gpt2's q | k | v).
struct LayoutTensor {
  std::string name;
  bool conv1d = false;  // stored [in][out], GPT-2's Conv1D; else [out][in]
  size_t rank = 0;      // 1 (bias, norm) or 2 (matrix)
  int64_t in = 1;       // canonical inner dimension; 1 for rank 1
  int64_t out = 0;      // sum of the parts' rows
  std::vector<LayoutPart> parts;
  std::vector<int64_t> shape;  // row-major as stored: [out], [out][in] or conv1d [in][out]

  int64_t elements() const { return out * in; }
};

// The file's tensors for a config, in file order (first appearance in the
// canonical table). Fails only if the canonical table and the name table
// disagree, which is a bug here, not in a file.
Result<std::vector<LayoutTensor>> file_layout(FileFormat format, const Config& config,
                                              const std::vector<TensorView>& canonical);

// The Hugging Face name of one canonical tensor ("tok_embedding" ->
// "model.embed_tokens.weight", "layers.0.wq" -> "transformer.h.0.attn.c_attn.weight");
// empty when the family has no such tensor.
std::string hf_tensor_name(Family family, std::string_view canonical);

// Canonical values into one file tensor's row-major storage. values [elements()]
void pack(const LayoutTensor& tensor, const std::vector<TensorView>& canonical,
          std::span<float> values);

// One file tensor's row-major storage into the canonical tensors it holds.
// values [elements()]
void unpack(const LayoutTensor& tensor, std::span<const float> values,
            const std::vector<TensorRef>& canonical);

}  // namespace kvcheck
