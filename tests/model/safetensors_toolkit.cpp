// The safetensors tests' toolkit (safetensors_toolkit.h).
#include "tests/model/safetensors_toolkit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace kvcheck::safetensors_test {

Config small_gpt2() {
  Config c;
  c.family = Family::kGpt2;
  c.n_layers = 2;
  c.d_model = 12;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 5;
  c.d_ff = 16;
  c.vocab = 11;
  c.max_pos = 13;
  c.qkv_bias = true;
  return c;
}

Config small_llama() {
  Config c;
  c.family = Family::kLlama;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_dim = 6;
  c.d_ff = 20;
  c.vocab = 11;
  c.max_pos = 32;
  c.rope_theta = 123456.789;
  c.norm_eps = 1e-6;
  return c;
}

uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

void expect_bitwise_equal(const Config& config, const Weights& expected, const Weights& actual) {
  ASSERT_EQ(check_shapes(config, actual), "");
  const std::vector<TensorView> want = tensor_views(config, expected);
  const std::vector<TensorView> got = tensor_views(config, actual);
  ASSERT_EQ(want.size(), got.size());
  for (size_t t = 0; t < want.size(); ++t) {
    ASSERT_EQ(want[t].data->size(), got[t].data->size()) << want[t].name;
    for (size_t k = 0; k < want[t].data->size(); ++k) {
      ASSERT_EQ(bits((*want[t].data)[k]), bits((*got[t].data)[k]))
          << want[t].name << "[" << k << "]";
    }
  }
}

Blob& Unpacked::at(const std::string& name) {
  for (auto& [n, blob] : tensors) {
    if (n == name) return blob;
  }
  throw std::out_of_range(name);
}

std::pair<json, std::vector<uint8_t>> split(const std::vector<uint8_t>& file) {
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | file.at(static_cast<size_t>(k));
  json header = json::parse(file.begin() + 8, file.begin() + 8 + static_cast<int64_t>(n));
  return {header, std::vector<uint8_t>(file.begin() + 8 + static_cast<int64_t>(n), file.end())};
}

std::vector<uint8_t> join(const std::string& header_text, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> file;  // [8 + header + data]
  const uint64_t n = header_text.size();
  for (int shift = 0; shift < 64; shift += 8) file.push_back(static_cast<uint8_t>(n >> shift));
  file.insert(file.end(), header_text.begin(), header_text.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

std::vector<uint8_t> join(const json& header, const std::vector<uint8_t>& data) {
  return join(header.dump(), data);
}

Unpacked unpack(const std::vector<uint8_t>& file) {
  auto [header, data] = split(file);
  Unpacked out;
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = entry;
      continue;
    }
    order.emplace_back(entry["data_offsets"][0].get<uint64_t>(), name);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [begin, name] : order) {
    const json& entry = header[name];
    const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
    out.tensors.push_back(
        {name, Blob{entry["dtype"], entry["shape"].get<std::vector<int64_t>>(),
                    std::vector<uint8_t>(data.begin() + static_cast<int64_t>(begin),
                                         data.begin() + static_cast<int64_t>(end))}});
  }
  return out;
}

std::vector<uint8_t> pack(const Unpacked& unpacked) {
  json header = json::object();
  if (!unpacked.metadata.is_null()) header["__metadata__"] = unpacked.metadata;
  std::vector<uint8_t> data;
  for (const auto& [name, blob] : unpacked.tensors) {
    header[name] = {{"dtype", blob.dtype},
                    {"shape", blob.shape},
                    {"data_offsets", {data.size(), data.size() + blob.bytes.size()}}};
    data.insert(data.end(), blob.bytes.begin(), blob.bytes.end());
  }
  return join(header, data);
}

std::vector<float> f32_values(const Blob& blob) {
  EXPECT_EQ(blob.dtype, "F32");
  std::vector<float> values(blob.bytes.size() / 4);  // [elements]
  for (size_t k = 0; k < values.size(); ++k) {
    uint32_t u = 0;
    for (int b = 3; b >= 0; --b) u = u << 8 | blob.bytes[4 * k + static_cast<size_t>(b)];
    values[k] = std::bit_cast<float>(u);
  }
  return values;
}

Blob u16_blob(const std::string& dtype, std::vector<int64_t> shape,
              const std::vector<uint16_t>& values) {
  Blob blob{dtype, std::move(shape), {}};
  for (uint16_t v : values) {
    blob.bytes.push_back(static_cast<uint8_t>(v & 0xFF));
    blob.bytes.push_back(static_cast<uint8_t>(v >> 8));
  }
  return blob;
}

}  // namespace kvcheck::safetensors_test
