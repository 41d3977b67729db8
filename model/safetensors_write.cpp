// The safetensors writer: kvcheck's models as Hugging Face checkpoints (the
// names and layouts of model/tensor_layout.h), with the Config in the
// metadata, so that an exec engine or a user's loader reads what the oracle
// computes on. The reader, safetensors.cpp, is its own file because it must
// survive any input; this side only meets checked weights.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/atomic_file.h"
#include "model/config_json.h"
#include "model/le_bytes.h"
#include "model/safetensors.h"
#include "model/tensor_layout.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// The header as the JSON library writes a DOM (keys sorted, no spaces; a test
// holds the two equal), written directly: building and dumping the DOM was
// a third of saving a small model, and an exec engine gets one per case.
// The data lies in layout order, the entries are listed by name.
std::string header_json(const Config& config, const std::vector<LayoutTensor>& layout) {
  std::vector<uint64_t> offsets(layout.size() + 1, 0);  // [tensor + 1] data begins
  for (size_t t = 0; t < layout.size(); ++t)
    offsets[t + 1] = offsets[t] + static_cast<uint64_t>(layout[t].elements()) * 4;
  std::vector<std::pair<std::string_view, size_t>> by_name;  // [entries] key, layout index
  by_name.emplace_back(kSafetensorsMetadataKey, layout.size());
  for (size_t t = 0; t < layout.size(); ++t) by_name.emplace_back(layout[t].name, t);
  std::sort(by_name.begin(), by_name.end());
  std::string text = "{";
  for (const auto& [name, t] : by_name) {
    if (text.size() > 1) text += ',';
    text += json(name).dump() + ":";
    if (t == layout.size()) {
      text += "{\"format\":\"pt\",\"" + std::string(kSafetensorsConfigKey) +
              "\":" + json(config_to_json(config).dump()).dump() + "}";
      continue;
    }
    text += "{\"data_offsets\":[" + std::to_string(offsets[t]) + "," +
            std::to_string(offsets[t + 1]) + "],\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < layout[t].shape.size(); ++d)
      text += (d ? "," : "") + std::to_string(layout[t].shape[d]);
    text += "]}";
  }
  return text + "}";
}

}  // namespace

std::vector<uint8_t> save_safetensors(const Config& config, const Weights& weights) {
  if (std::string error = config.validate(); !error.empty()) {
    throw InputError("save_safetensors: config: " + error);
  }
  if (std::string error = check_shapes(config, weights); !error.empty()) {
    throw InputError("save_safetensors: " + error);
  }
  const std::vector<TensorView> canonical = tensor_views(config, weights);
  Result<std::vector<LayoutTensor>> layout =
      file_layout(FileFormat::kHuggingFace, config, canonical);
  if (!layout.ok()) throw std::logic_error(layout.error());

  std::string header_text = header_json(config, layout.value());
  // Spaces (valid JSON whitespace) pad the header so the data section starts
  // 8-byte aligned, as the reference writer does, for readers that map it.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out;  // [8 + header + data] the whole file
  uint64_t data_bytes = 0;
  for (const LayoutTensor& hf : layout.value()) data_bytes += uint64_t(hf.elements()) * 4;
  out.reserve(8 + header_text.size() + data_bytes);
  const uint64_t header_bytes = header_text.size();
  append_le(out, header_bytes, 8);
  out.insert(out.end(), header_text.begin(), header_text.end());
  std::vector<float> values;  // [hf.elements()] one HF tensor in file layout
  for (const LayoutTensor& hf : layout.value()) {
    values.resize(static_cast<size_t>(hf.elements()));
    pack(hf, canonical, values);
    append_f32le(out, values);
  }
  return out;
}

std::string save_safetensors_file(const std::string& path, const Config& config,
                                  const Weights& weights) {
  return write_file_atomically_from(path, [&] { return save_safetensors(config, weights); });
}

}  // namespace kvcheck
