// The safetensors tests' own toolkit, written from the format description
// rather than from the code under test: small configs whose widths all
// differ, a bitwise comparison of weights, and a file taken apart into its
// header and tensors and put back together (so a test can change one thing).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::safetensors_test {

using nlohmann::json;

// Small, but every width differs, q width (H*D = 20) differs from E (12), and
// GQA (4 query heads on 2 KV heads) makes the c_attn column blocks unequal.
Config small_gpt2();
Config small_llama();
uint32_t bits(float x);

// Weights::operator== compares floats, which calls -0 equal to +0 and NaN
// unequal to itself; a file format must preserve the bits.
void expect_bitwise_equal(const Config& config, const Weights& expected, const Weights& actual);

struct Blob {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // [elements * dtype size] little-endian
};

struct Unpacked {
  json metadata;
  std::vector<std::pair<std::string, Blob>> tensors;  // file order
  Blob& at(const std::string& name);
};

std::pair<json, std::vector<uint8_t>> split(const std::vector<uint8_t>& file);
std::vector<uint8_t> join(const std::string& header_text, const std::vector<uint8_t>& data);
std::vector<uint8_t> join(const json& header, const std::vector<uint8_t>& data);
Unpacked unpack(const std::vector<uint8_t>& file);
std::vector<uint8_t> pack(const Unpacked& unpacked);
std::vector<float> f32_values(const Blob& blob);
Blob u16_blob(const std::string& dtype, std::vector<int64_t> shape,
              const std::vector<uint16_t>& values);

}  // namespace kvcheck::safetensors_test
