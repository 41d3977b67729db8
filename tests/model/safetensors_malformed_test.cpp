// The safetensors reader on malformed files: every defect of framing,
// header, entries, shapes, offsets and metadata is a failure with a message
// naming it, never a crash or a large allocation.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "model/le_bytes.h"
#include "model/rng.h"
#include "tests/model/safetensors_toolkit.h"

namespace kvcheck::safetensors_test {
namespace {

// --- Malformed files: each is a failure with a message, never a crash.

std::string load_error(const std::vector<uint8_t>& file) {
  const Result<ModelFile> loaded = load_safetensors(file);
  return loaded.ok() ? "(loaded)" : loaded.error();
}

std::vector<uint8_t> small_gpt2_file() {
  Config config = small_gpt2();
  config.n_layers = 1;
  return save_safetensors(config, init_weights(config, 3));
}

// The valid file's header with one change, over the same data section.
std::vector<uint8_t> with_header_change(void (*change)(json&)) {
  auto [header, data] = split(small_gpt2_file());
  change(header);
  return join(header, data);
}

TEST(SafetensorsMalformed, TooShortForTheLength) {
  EXPECT_EQ(load_error({1, 2, 3}), "file is 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(load_error({}), "file is 0 bytes, too short for the 8-byte header length");
}

TEST(SafetensorsMalformed, AbsurdHeaderLength) {
  std::vector<uint8_t> file = small_gpt2_file();
  const uint64_t n = 100'000'001;
  for (int k = 0; k < 8; ++k) file[static_cast<size_t>(k)] = static_cast<uint8_t>(n >> (8 * k));
  EXPECT_EQ(load_error(file), "header length 100000001 exceeds the limit of 100000000 bytes");
  for (int k = 0; k < 8; ++k) file[static_cast<size_t>(k)] = 0xFF;
  EXPECT_EQ(load_error(file),
            "header length 18446744073709551615 exceeds the limit of 100000000 bytes");
}

TEST(SafetensorsMalformed, HeaderLengthPastTheEnd) {
  const std::vector<uint8_t> file = join(std::string("{}"), {});
  std::vector<uint8_t> longer = file;
  longer[0] = 3;  // claims 3 header bytes, 2 follow
  EXPECT_EQ(load_error(longer),
            "header length 3 runs past the end of the file (2 bytes follow the length)");
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  EXPECT_EQ(load_error(join(std::string("{\"a\": "), {})), "header is not valid JSON");
  EXPECT_EQ(load_error(join(std::string(""), {})), "header is not valid JSON");
  std::string bad_utf8 = "{\"\xff\": 1}";
  EXPECT_EQ(load_error(join(bad_utf8, {})), "header is not valid JSON");
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  EXPECT_EQ(load_error(join(std::string("[1, 2]"), {})),
            "header: expected a JSON object, got array");
  EXPECT_EQ(load_error(join(std::string("7"), {})), "header: expected a JSON object, got number");
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  auto [header, data] = split(small_gpt2_file());
  const std::string text = header.dump();
  // A second lm_head.weight entry at the top level.
  const std::string top = text.substr(0, text.size() - 1) +
                          ",\"lm_head.weight\":" + header["lm_head.weight"].dump() + "}";
  EXPECT_EQ(load_error(join(top, data)), "header: duplicate key \"lm_head.weight\"");
  // A repeated field inside one entry.
  std::string inner = text;
  const std::string dtype = "\"dtype\":\"F32\"";
  inner.replace(inner.find(dtype), dtype.size(), dtype + ",\"dtype\":\"F32\"");
  EXPECT_EQ(load_error(join(inner, data)), "header: duplicate key \"dtype\"");
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"] = 5; })),
            "tensor \"lm_head.weight\": expected an object, got 5");
}

TEST(SafetensorsMalformed, EntryFields) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"].erase("dtype"); })),
            "tensor \"lm_head.weight\": missing field \"dtype\"");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["offset"] = 0; })),
            "tensor \"lm_head.weight\": unexpected field \"offset\"");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  // Every dtype of the specification is framed (a checkpoint's integer
  // buffers are skipped by --model), so a wrong size is named first ...
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "F64"; })),
            "tensor \"lm_head.weight\": data_offsets [6176, 6704] hold 528 bytes, but shape [11, "
            "12] of F64 needs 1056");
  // ... and a weight in a dtype kvcheck does not widen is refused by name.
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "I32"; })),
            "tensor \"lm_head.weight\": dtype \"I32\" is not supported (expected \"F32\", \"F16\" "
            "or \"BF16\")");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "f32"; })),
            "tensor \"lm_head.weight\": dtype \"f32\" is not supported (expected \"F32\", \"F16\" "
            "or \"BF16\")");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = 4; })),
            "tensor \"lm_head.weight\": dtype: expected a string, got 4");
}

TEST(SafetensorsMalformed, ShapeNotAListOfNonNegativeIntegers) {
  const char* prefix =
      "tensor \"lm_head.weight\": shape: expected a list of non-negative integers, got ";
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["shape"] = 132; })),
            std::string(prefix) + "132");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({-11, -12});
            })),
            std::string(prefix) + "[-11,-12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({11.0, 12});
            })),
            std::string(prefix) + "[11.0,12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({"11", 12});
            })),
            std::string(prefix) + "[\"11\",12]");
}

TEST(SafetensorsMalformed, ShapeProductOverflow) {
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({4294967296ull, 4294967296ull});
            })),
            "tensor \"lm_head.weight\": shape [4294967296, 4294967296] has too many elements");
  // Fits in 64 bits as a count, but not once multiplied by 4 bytes.
  EXPECT_EQ(load_error(with_header_change(
                [](json& h) { h["lm_head.weight"]["shape"] = json::array({uint64_t{1} << 62}); })),
            "tensor \"lm_head.weight\": shape [4611686018427387904] has too many elements");
}

TEST(SafetensorsMalformed, ShapeDoesNotMatchTheConfig) {
  // Same element count, so only the config check can catch it.
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["lm_head.weight"]["shape"] = json::array({12, 11});
            })),
            "tensor \"lm_head.weight\": shape [12, 11] does not match the config's [11, 12]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["transformer.h.0.attn.c_attn.weight"]["shape"] = json::array({40, 12});
            })),
            "tensor \"transformer.h.0.attn.c_attn.weight\": shape [40, 12] does not match the "
            "config's [12, 40]");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              h["transformer.ln_f.bias"]["shape"] = json::array({1, 12});
            })),
            "tensor \"transformer.ln_f.bias\": shape [1, 12] does not match the config's [12]");
}

TEST(SafetensorsMalformed, DataOffsets) {
  auto [header, data] = split(small_gpt2_file());
  const uint64_t data_bytes = data.size();
  const uint64_t begin = header["lm_head.weight"]["data_offsets"][0];
  EXPECT_EQ(begin + 11 * 12 * 4, data_bytes);  // the writer puts lm_head last

  header["lm_head.weight"]["data_offsets"] = json::array({begin, data_bytes + 4});
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"lm_head.weight\": data_offsets [" + std::to_string(begin) + ", " +
                std::to_string(data_bytes + 4) + "] run past the end of the data (" +
                std::to_string(data_bytes) + " bytes); is the file truncated?");

  header["lm_head.weight"]["data_offsets"] = json::array({data_bytes, begin});
  EXPECT_EQ(load_error(join(header, data)), "tensor \"lm_head.weight\": data_offsets [" +
                                                std::to_string(data_bytes) + ", " +
                                                std::to_string(begin) + "] are reversed");

  header["lm_head.weight"]["data_offsets"] = json::array({begin + 4, data_bytes});
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"lm_head.weight\": data_offsets [" + std::to_string(begin + 4) + ", " +
                std::to_string(data_bytes) +
                "] hold 524 bytes, but shape [11, 12] of F32 needs 528");

  for (const json& bad :
       {json::array({begin}), json::array({-1, 4}), json(7), json::array({0.0, 4})}) {
    header["lm_head.weight"]["data_offsets"] = bad;
    EXPECT_EQ(load_error(join(header, data)),
              "tensor \"lm_head.weight\": data_offsets: expected [begin, end] as non-negative "
              "integers, got " +
                  bad.dump());
  }
}

TEST(SafetensorsMalformed, SizeDisagreesWithDtype) {
  // Claims BF16 over an F32-sized range.
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["lm_head.weight"]["dtype"] = "BF16"; })),
            "tensor \"lm_head.weight\": data_offsets [6176, 6704] hold 528 bytes, but shape "
            "[11, 12] of BF16 needs 264");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  auto [header, data] = split(small_gpt2_file());
  const json weight_range = header["transformer.ln_f.weight"]["data_offsets"];
  header["transformer.ln_f.bias"]["data_offsets"] = weight_range;
  const std::string range = "[" + weight_range[0].dump() + ", " + weight_range[1].dump() + ")";
  EXPECT_EQ(load_error(join(header, data)), "tensors \"transformer.ln_f.bias\" " + range +
                                                " and \"transformer.ln_f.weight\" " + range +
                                                " overlap");
}

TEST(SafetensorsMalformed, BytesThatBelongToNoTensor) {
  auto [header, data] = split(small_gpt2_file());
  const size_t size = data.size();
  data.resize(size + 4);
  EXPECT_EQ(load_error(join(header, data)), "data: bytes [" + std::to_string(size) + ", " +
                                                std::to_string(size + 4) + ") belong to no tensor");
}

TEST(SafetensorsMalformed, MissingTensor) {
  Unpacked file = unpack(small_gpt2_file());
  std::erase_if(file.tensors, [](const auto& t) { return t.first == "transformer.ln_f.bias"; });
  EXPECT_EQ(load_error(pack(file)), "missing tensor \"transformer.ln_f.bias\" (shape [12])");
}

TEST(SafetensorsMalformed, UnexpectedTensor) {
  Unpacked file = unpack(small_gpt2_file());
  // HF's causal-mask buffer, as older GPT-2 checkpoints carry it.
  file.tensors.push_back({"transformer.h.0.attn.bias", u16_blob("BF16", {1}, {0})});
  EXPECT_EQ(load_error(pack(file)),
            "unexpected tensor \"transformer.h.0.attn.bias\": not part of a gpt2 model with this "
            "config");
}

TEST(SafetensorsMalformed, QkvBiasPresentButNotConfigured) {
  // A gpt2 file with c_attn.bias whose config says qkv_bias false.
  Config config = small_gpt2();
  config.n_layers = 1;
  Unpacked file = unpack(save_safetensors(config, init_weights(config, 3)));
  config.qkv_bias = false;
  file.metadata["kvcheck.config"] = config_to_json(config).dump();
  EXPECT_EQ(load_error(pack(file)),
            "unexpected tensor \"transformer.h.0.attn.c_attn.bias\": not part of a gpt2 model "
            "with this config");
}

TEST(SafetensorsMalformed, TruncatedFile) {
  std::vector<uint8_t> file = small_gpt2_file();
  file.resize(file.size() - 100);
  const std::string error = load_error(file);
  EXPECT_NE(error.find("tensor \"lm_head.weight\": data_offsets [6176, 6704] run past the end of "
                       "the data (6604 bytes); is the file truncated?"),
            std::string::npos)
      << error;
}

// Every truncation inside the length field and the header; in the data
// section, where every cut takes the one path that compares the section's
// length with the header's offsets, each tensor's first and last bytes and
// every 61st byte (each cut parses the whole header again: under ci/test's
// ASan and coverage build, every byte of the data section cost 15 s).
TEST(SafetensorsMalformed, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> file = small_gpt2_file();
  const auto [header, data] = split(file);
  const size_t data_begin = file.size() - data.size();
  std::set<size_t> cuts;  // prefix lengths
  for (size_t size = 0; size <= data_begin; ++size) cuts.insert(size);
  for (size_t size = data_begin; size < file.size(); size += 61) cuts.insert(size);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    for (const uint64_t offset : entry["data_offsets"].get<std::vector<uint64_t>>()) {
      for (const size_t at :
           {data_begin + offset - 1, data_begin + offset, data_begin + offset + 1}) {
        if (at < file.size()) cuts.insert(at);
      }
    }
  }
  for (const size_t size : cuts) {
    const std::vector<uint8_t> prefix(file.begin(), file.begin() + static_cast<int64_t>(size));
    ASSERT_FALSE(load_safetensors(prefix).ok()) << size;
  }
  EXPECT_GT(cuts.size(), data_begin + (file.size() - data_begin) / 61);
  std::printf("%zu cuts of %zu bytes (data from %zu)\n", cuts.size(), file.size(), data_begin);
}

TEST(SafetensorsMalformed, ByteFlipsInTheHeaderNeverCrash) {
  const std::vector<uint8_t> file = small_gpt2_file();
  auto [header, data] = split(file);
  const size_t header_end = file.size() - data.size();
  const uint64_t seed = 7;
  SCOPED_TRACE("seed " + std::to_string(seed));
  SplitMix64 rng(seed);
  int failures = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> mutated = file;
    const size_t at = static_cast<size_t>(rng.below(header_end));
    mutated[at] = static_cast<uint8_t>(rng.below(256));
    const Result<ModelFile> loaded = load_safetensors(mutated);
    if (!loaded.ok()) {
      ++failures;
      EXPECT_FALSE(loaded.error().empty());
    }
  }
  EXPECT_GT(failures, 1000);  // most single-byte changes break something
}

TEST(SafetensorsMalformed, Metadata) {
  EXPECT_EQ(load_error(with_header_change([](json& h) { h.erase("__metadata__"); })),
            "__metadata__ has no \"kvcheck.config\": the model config must be stored with the "
            "weights (save_safetensors writes it)");
  EXPECT_EQ(
      load_error(with_header_change([](json& h) { h["__metadata__"].erase("kvcheck.config"); })),
      "__metadata__ has no \"kvcheck.config\": the model config must be stored with the "
      "weights (save_safetensors writes it)");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["__metadata__"] = json::array(); })),
            "__metadata__: expected an object of strings, got []");
  EXPECT_EQ(load_error(with_header_change([](json& h) { h["__metadata__"]["format"] = 1; })),
            "__metadata__.\"format\": expected a string, got 1");
  EXPECT_EQ(load_error(with_header_change(
                [](json& h) { h["__metadata__"]["kvcheck.config"] = "{\"family\":"; })),
            "kvcheck.config: not valid JSON");
  EXPECT_EQ(load_error(with_header_change([](json& h) {
              json config = json::parse(h["__metadata__"]["kvcheck.config"].get<std::string>());
              config["n_heads"] = "four";
              h["__metadata__"]["kvcheck.config"] = config.dump();
            })),
            "kvcheck.config: config.n_heads: expected an integer, got \"four\"");
}

TEST(SafetensorsMalformed, HugeConfigInASmallFileAllocatesNothing) {
  // A config with 2^34 parameters over a few kilobytes must fail on the first
  // missing or mis-shaped tensor, before any allocation.
  auto [header, data] = split(small_gpt2_file());
  json config = json::parse(header["__metadata__"]["kvcheck.config"].get<std::string>());
  config["vocab"] = 1 << 20;
  config["d_model"] = 4096;
  header["__metadata__"]["kvcheck.config"] = config.dump();
  EXPECT_EQ(load_error(join(header, data)),
            "tensor \"transformer.wte.weight\": shape [11, 12] does not match the config's "
            "[1048576, 4096]");
}

}  // namespace
}  // namespace kvcheck::safetensors_test
