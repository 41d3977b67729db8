// The safetensors reader: any bytes in, weights or one clear message out
// (the loader is fuzzed, docs/FUZZING.md). The header is read by a streaming
// SAX pass for speed, with the DOM parser deciding whenever it gives up; the
// writer is safetensors_write.cpp.
#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "model/file_bytes.h"
#include "model/half_float.h"
#include "model/tensor_layout.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// The reference implementation's limit: no real header comes near it, and it
// bounds what a hostile length field can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// ---------------------------------------------------------------------------
// Dtypes and little-endian element codecs.

// kOther: a dtype of the safetensors specification that kvcheck frames (so a
// checkpoint's integer buffers, such as GPT-2's attn.bias mask, can be
// skipped) but never reads as weights.
enum class Dtype { kF32, kF16, kBF16, kOther };

struct DtypeInfo {
  std::string_view name;
  Dtype dtype;
  uint64_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", Dtype::kF32, 4},    {"F16", Dtype::kF16, 2},       {"BF16", Dtype::kBF16, 2},
    {"F64", Dtype::kOther, 8},  {"I64", Dtype::kOther, 8},     {"U64", Dtype::kOther, 8},
    {"I32", Dtype::kOther, 4},  {"U32", Dtype::kOther, 4},     {"I16", Dtype::kOther, 2},
    {"U16", Dtype::kOther, 2},  {"I8", Dtype::kOther, 1},      {"U8", Dtype::kOther, 1},
    {"BOOL", Dtype::kOther, 1}, {"F8_E4M3", Dtype::kOther, 1}, {"F8_E5M2", Dtype::kOther, 1}};

const DtypeInfo* dtype_info(std::string_view name) {
  for (const DtypeInfo& candidate : kDtypes) {
    if (name == candidate.name) return &candidate;
  }
  return nullptr;
}

std::string unsupported_dtype(const std::string& tensor, std::string_view dtype) {
  return "tensor \"" + tensor + "\": dtype \"" + std::string(dtype) +
         "\" is not supported (expected \"F32\", \"F16\" or \"BF16\")";
}

uint32_t read_u32le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

uint16_t read_u16le(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

// `bytes` holds exactly out.size() elements of `dtype`.
void decode(Dtype dtype, std::span<const uint8_t> bytes, std::vector<float>& out) {
  const uint8_t* p = bytes.data();
  switch (dtype) {
    case Dtype::kF32:
      for (size_t k = 0; k < out.size(); ++k) out[k] = std::bit_cast<float>(read_u32le(p + 4 * k));
      break;
    case Dtype::kF16:
      for (size_t k = 0; k < out.size(); ++k) out[k] = f16_to_float(read_u16le(p + 2 * k));
      break;
    case Dtype::kBF16:
      for (size_t k = 0; k < out.size(); ++k) out[k] = bf16_to_float(read_u16le(p + 2 * k));
      break;
    case Dtype::kOther:
      break;  // callers refuse these before decoding
  }
}

// ---------------------------------------------------------------------------
// Header parsing: everything that can be checked without the config.

using FileTensor = SafetensorsTensor;
using FileHeader = SafetensorsHeader;

std::string quote(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

template <class Int>
std::string shape_text(const std::vector<Int>& shape) {
  std::string text = "[";
  for (size_t k = 0; k < shape.size(); ++k) text += (k ? ", " : "") + std::to_string(shape[k]);
  return text + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// nlohmann keeps the last of two equal keys without a word. A file whose
// meaning depends on which duplicate a reader keeps is malformed, so the
// parse callback records the first repeated key of any object.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_.empty() && parsed.is_string() &&
            !open_.back().insert(parsed.get<std::string>()).second && duplicate_.empty()) {
          duplicate_ = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  std::vector<std::set<std::string>> open_;  // [nesting depth] keys seen so far
  std::string duplicate_;
};

// Reads a non-negative integer that fits in 64 bits.
std::optional<uint64_t> as_u64(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<uint64_t>();
}

// The checks of one entry once its fields have their JSON types, shared by
// both header readers: the bytes of a known dtype's shape fit in 64 bits, and
// the offsets lie inside the data and hold exactly those bytes. Messages are
// built only on failure: a loader for an exec engine parses a header per
// case, and quoting every shape up front was a tenth of that.
std::string who(const std::string& name) {
  return "tensor " + quote(name) + ": ";
}

Result<uint64_t> shape_bytes(const std::string& name, const DtypeInfo& info,
                             const std::vector<uint64_t>& shape) {
  uint64_t elements = 1;
  bool overflow = false;
  for (const uint64_t d : shape) {
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / d) overflow = true;
    elements *= d;  // unsigned wraparound is defined; `overflow` says whether it happened
  }
  if (overflow || elements > std::numeric_limits<uint64_t>::max() / info.bytes) {
    return Result<uint64_t>::failure(who(name) + "shape " + shape_text(shape) +
                                     " has too many elements");
  }
  return elements * info.bytes;
}

std::string check_offsets(const std::string& name, const DtypeInfo& info,
                          const std::vector<uint64_t>& shape, uint64_t needed, uint64_t begin,
                          uint64_t end, uint64_t data_bytes) {
  const auto offsets_text = [&] {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  };
  if (begin > end) return who(name) + "data_offsets " + offsets_text() + " are reversed";
  if (end > data_bytes) {
    return who(name) + "data_offsets " + offsets_text() + " run past the end of the data (" +
           std::to_string(data_bytes) + " bytes); is the file truncated?";
  }
  if (end - begin != needed) {
    return who(name) + "data_offsets " + offsets_text() + " hold " + std::to_string(end - begin) +
           " bytes, but shape " + shape_text(shape) + " of " + std::string(info.name) + " needs " +
           std::to_string(needed);
  }
  return {};
}

Result<FileTensor> parse_entry(const std::string& name, const json& entry, uint64_t data_bytes) {
  using R = Result<FileTensor>;
  if (!entry.is_object())
    return R::failure(who(name) + "expected an object, got " + json_for_message(entry));
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return R::failure(who(name) + "unexpected field " + quote(key));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) return R::failure(who(name) + "missing field " + quote(field));
  }
  FileTensor tensor;

  const json& dtype = entry.at("dtype");
  if (!dtype.is_string())
    return R::failure(who(name) + "dtype: expected a string, got " + json_for_message(dtype));
  const DtypeInfo* info = dtype_info(dtype.get<std::string>());
  if (!info) return R::failure(unsupported_dtype(name, dtype.get<std::string>()));
  tensor.dtype = std::string(info->name);

  const json& shape = entry.at("shape");
  const auto shape_error = [&] {
    return R::failure(who(name) + "shape: expected a list of non-negative integers, got " +
                      json_for_message(shape));
  };
  if (!shape.is_array()) return shape_error();
  for (const json& dim : shape) {
    const std::optional<uint64_t> d = as_u64(dim);
    if (!d) return shape_error();
    tensor.shape.push_back(*d);
  }
  const Result<uint64_t> needed = shape_bytes(name, *info, tensor.shape);
  if (!needed.ok()) return R::failure(needed.error());

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return R::failure(who(name) +
                      "data_offsets: expected [begin, end] as non-negative integers, got " +
                      json_for_message(offsets));
  }
  tensor.begin = offsets[0].get<uint64_t>();
  tensor.end = offsets[1].get<uint64_t>();
  if (std::string error = check_offsets(name, *info, tensor.shape, needed.value(), tensor.begin,
                                        tensor.end, data_bytes);
      !error.empty())
    return R::failure(error);
  return tensor;
}

// The data section must be tiled exactly: no overlaps (one byte read as two
// tensors) and no holes (bytes no reader sees, the stuff of polyglot files),
// as the safetensors specification requires.
std::string check_tiling(const std::map<std::string, FileTensor>& tensors, uint64_t data_bytes) {
  std::vector<std::pair<const std::string*, const FileTensor*>> by_offset;  // [tensors]
  for (const auto& [name, tensor] : tensors) by_offset.emplace_back(&name, &tensor);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;  // bytes [0, covered) belong to a tensor
  const std::string* last = nullptr;
  for (const auto& [name, tensor] : by_offset) {
    if (tensor->begin < covered) {
      const FileTensor& previous = tensors.at(*last);
      return "tensors " + quote(*last) + " " + range_text(previous.begin, previous.end) + " and " +
             quote(*name) + " " + range_text(tensor->begin, tensor->end) + " overlap";
    }
    if (tensor->begin > covered) {
      return "data: bytes " + range_text(covered, tensor->begin) + " belong to no tensor";
    }
    covered = tensor->end;
    last = name;
  }
  if (covered != data_bytes) {
    return "data: bytes " + range_text(covered, data_bytes) + " belong to no tensor";
  }
  return {};
}

// The whole header through the JSON library's DOM: every check, with its
// message. parse_header takes the streaming reader below first.
Result<FileHeader> parse_header_dom(std::span<const uint8_t> bytes) {
  using R = Result<FileHeader>;
  if (bytes.size() < 8) {
    return R::failure("file is " + std::to_string(bytes.size()) +
                      " bytes, too short for the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  for (int k = 7; k >= 0; --k) header_bytes = header_bytes << 8 | bytes[static_cast<size_t>(k)];
  if (header_bytes > kMaxHeaderBytes) {
    return R::failure("header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const uint64_t after_length = bytes.size() - 8;
  if (header_bytes > after_length) {
    return R::failure("header length " + std::to_string(header_bytes) +
                      " runs past the end of the file (" + std::to_string(after_length) +
                      " bytes follow the length)");
  }
  const std::span<const uint8_t> text = bytes.subspan(8, header_bytes);

  DuplicateKeyFinder duplicates;
  const json header = json::parse(text.begin(), text.end(), std::ref(duplicates),
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return R::failure("header is not valid JSON");
  if (!duplicates.duplicate().empty()) {
    return R::failure("header: duplicate key " + quote(duplicates.duplicate()));
  }
  if (!header.is_object()) {
    return R::failure(std::string("header: expected a JSON object, got ") + header.type_name());
  }

  FileHeader parsed;
  parsed.data = bytes.subspan(8 + header_bytes);
  for (const auto& [name, entry] : header.items()) {
    if (name == kSafetensorsMetadataKey) {
      if (!entry.is_object()) {
        return R::failure("__metadata__: expected an object of strings, got " +
                          json_for_message(entry));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return R::failure("__metadata__." + quote(key) + ": expected a string, got " +
                            json_for_message(value));
        }
        parsed.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    Result<FileTensor> tensor = parse_entry(name, entry, parsed.data.size());
    if (!tensor.ok()) return R::failure(tensor.error());
    tensor.value().bytes =
        parsed.data.subspan(tensor.value().begin, tensor.value().end - tensor.value().begin);
    parsed.tensors[name] = std::move(tensor).value();
  }
  if (std::string error = check_tiling(parsed.tensors, parsed.data.size()); !error.empty()) {
    return R::failure(error);
  }
  return parsed;
}

// The header read as a stream of JSON events into the result directly, with
// no DOM: a loader for an exec engine parses a header per case, and the DOM's
// nodes were a third of a small model's load. It accepts only a header the
// DOM reader accepts, and gives up (nullopt) at anything else, whatever it
// is: a wrong type, a duplicate key, a failed check, invalid JSON. The DOM
// reader then decides and names the problem, so every message comes from
// one place. safetensors_fuzz holds the two readers equal.
class StreamingHeaderReader : public nlohmann::json_sax<json> {
 public:
  explicit StreamingHeaderReader(FileHeader& out) : out_(out) {}

  bool start_object(std::size_t) override {
    if (depth_ > 1) return false;
    return ++depth_, true;
  }
  bool key(string_t& key) override {
    if (depth_ == 1) {
      name_ = key;
      in_metadata_ = key == kSafetensorsMetadataKey;
      if (in_metadata_) return !std::exchange(metadata_seen_, true);
      fields_ = 0;
      shape_.clear();
      return !out_.tensors.contains(name_);
    }
    if (depth_ != 2) return false;
    field_ = key;
    if (in_metadata_) return !out_.metadata.contains(field_);
    const int bit = key == "dtype" ? 1 : key == "shape" ? 2 : key == "data_offsets" ? 4 : 0;
    if (bit == 0 || (fields_ & bit) != 0) return false;
    fields_ |= bit;
    return true;
  }
  bool string(string_t& value) override {
    if (depth_ != 2) return false;
    if (in_metadata_) return out_.metadata.emplace(field_, value), true;
    if (field_ != "dtype") return false;
    dtype_ = value;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 2 || in_metadata_ || field_ == "dtype") return false;
    offsets_.clear();
    return ++depth_, true;
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (depth_ != 3) return false;
    if (field_ == "shape") return shape_.push_back(value), true;
    offsets_.push_back(value);
    return offsets_.size() <= 2;
  }
  bool end_array() override {
    if (field_ == "data_offsets" && offsets_.size() != 2) return false;
    return --depth_, true;
  }
  bool end_object() override {
    if (depth_ == 2 && !in_metadata_ && !add_tensor()) return false;
    return --depth_, true;
  }
  bool null() override { return false; }
  bool boolean(bool) override { return false; }
  bool number_integer(number_integer_t) override { return false; }
  bool number_float(number_float_t, const string_t&) override { return false; }
  bool binary(binary_t&) override { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool add_tensor() {
    const DtypeInfo* info = fields_ == 7 ? dtype_info(dtype_) : nullptr;
    if (!info) return false;
    const Result<uint64_t> needed = shape_bytes(name_, *info, shape_);
    if (!needed.ok() || !check_offsets(name_, *info, shape_, needed.value(), offsets_[0],
                                       offsets_[1], out_.data.size())
                             .empty())
      return false;
    FileTensor& tensor = out_.tensors[name_];
    tensor.dtype = std::string(info->name);
    tensor.shape = shape_;
    tensor.begin = offsets_[0];
    tensor.end = offsets_[1];
    tensor.bytes = out_.data.subspan(tensor.begin, tensor.end - tensor.begin);
    return true;
  }

  FileHeader& out_;
  int depth_ = 0;     // 1 in the header object, 2 in an entry, 3 in one of its lists
  std::string name_;  // the entry's key
  bool in_metadata_ = false, metadata_seen_ = false;
  std::string field_;  // the key inside the entry
  int fields_ = 0;     // bits: dtype 1, shape 2, data_offsets 4
  std::string dtype_;
  std::vector<uint64_t> shape_, offsets_;
};

std::optional<FileHeader> read_header_streaming(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return std::nullopt;
  uint64_t header_bytes = 0;
  for (int k = 7; k >= 0; --k) header_bytes = header_bytes << 8 | bytes[static_cast<size_t>(k)];
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) return std::nullopt;
  const std::span<const uint8_t> text = bytes.subspan(8, header_bytes);
  FileHeader header;
  header.data = bytes.subspan(8 + header_bytes);
  StreamingHeaderReader reader(header);
  if (!json::sax_parse(text.begin(), text.end(), &reader)) return std::nullopt;
  if (!check_tiling(header.tensors, header.data.size()).empty()) return std::nullopt;
  return header;
}

Result<FileHeader> parse_header(std::span<const uint8_t> bytes) {
  if (std::optional<FileHeader> header = read_header_streaming(bytes)) return *std::move(header);
  return parse_header_dom(bytes);
}

Result<Config> config_from_metadata(const FileHeader& header) {
  const auto it = header.metadata.find(std::string(kSafetensorsConfigKey));
  if (it == header.metadata.end()) {
    return Result<Config>::failure(
        "__metadata__ has no \"kvcheck.config\": the model config must be stored with the weights "
        "(save_safetensors writes it)");
  }
  const std::string& text = it->second;
  const json config_json = json::parse(text.begin(), text.end(), nullptr, false);
  if (config_json.is_discarded()) return Result<Config>::failure("kvcheck.config: not valid JSON");
  Result<Config> config = config_from_json(config_json);
  if (!config.ok()) return Result<Config>::failure("kvcheck.config: " + config.error());
  return config;
}

}  // namespace

Result<Weights> weights_from_hf_tensors(const std::map<std::string, SafetensorsTensor>& tensors,
                                        const Config& config) {
  using R = Result<Weights>;
  // Names and shapes only: nothing is allocated until the file is known to
  // hold every tensor, so a config claiming billions of parameters in a
  // small file costs nothing.
  Weights skeleton;
  skeleton.layers.resize(static_cast<size_t>(config.n_layers));
  Result<std::vector<LayoutTensor>> layout =
      file_layout(FileFormat::kHuggingFace, config, tensor_views(config, skeleton));
  if (!layout.ok()) return R::failure(layout.error());

  const std::string model = std::string("a ") + family_name(config.family) + " model";
  std::set<std::string_view> expected;
  for (const LayoutTensor& hf : layout.value()) {
    expected.insert(hf.name);
    const auto it = tensors.find(hf.name);
    if (it == tensors.end()) {
      return R::failure("missing tensor " + quote(hf.name) + " (shape " + shape_text(hf.shape) +
                        ")");
    }
    const std::vector<uint64_t>& actual = it->second.shape;
    if (!std::equal(actual.begin(), actual.end(), hf.shape.begin(), hf.shape.end(),
                    [](uint64_t a, int64_t b) { return a == static_cast<uint64_t>(b); })) {
      return R::failure("tensor " + quote(hf.name) + ": shape " + shape_text(actual) +
                        " does not match the config's " + shape_text(hf.shape));
    }
    const DtypeInfo* info = dtype_info(it->second.dtype);
    if (!info || info->dtype == Dtype::kOther) {
      return R::failure(unsupported_dtype(hf.name, it->second.dtype));
    }
    // Callers may build tensors by hand: the bytes must be what decode reads.
    if (it->second.bytes.size() != uint64_t(hf.elements()) * info->bytes) {
      return R::failure("tensor " + quote(hf.name) + ": holds " +
                        std::to_string(it->second.bytes.size()) + " bytes, shape " +
                        shape_text(hf.shape) + " of " + std::string(info->name) + " needs " +
                        std::to_string(uint64_t(hf.elements()) * info->bytes));
    }
  }
  for (const auto& [name, tensor] : tensors) {
    if (!expected.contains(name)) {
      return R::failure("unexpected tensor " + quote(name) + ": not part of " + model +
                        " with this config");
    }
  }

  Weights weights;
  const std::vector<TensorRef> canonical = tensor_table(config, weights);
  std::vector<float> values;  // [hf.elements()] one HF tensor, widened to float, file layout
  for (const LayoutTensor& hf : layout.value()) {
    const FileTensor& file = tensors.at(hf.name);
    values.resize(static_cast<size_t>(hf.elements()));
    decode(dtype_info(file.dtype)->dtype, file.bytes, values);
    unpack(hf, values, canonical);
  }
  return weights;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes) {
  return parse_header(bytes);
}

Result<SafetensorsHeader> parse_safetensors_header_dom(std::span<const uint8_t> bytes) {
  return parse_header_dom(bytes);
}

std::string decode_tensor(const std::string& name, const SafetensorsTensor& tensor,
                          std::span<float> out) {
  const DtypeInfo* info = dtype_info(tensor.dtype);
  if (!info || info->dtype == Dtype::kOther) return unsupported_dtype(name, tensor.dtype);
  if (tensor.bytes.size() != out.size() * info->bytes) {
    return "tensor " + quote(name) + ": holds " + std::to_string(tensor.bytes.size()) +
           " bytes, expected " + std::to_string(out.size() * info->bytes);
  }
  std::vector<float> values(out.size());  // [elements]
  decode(info->dtype, tensor.bytes, values);
  std::copy(values.begin(), values.end(), out.begin());
  return {};
}

namespace {

// Names the first field where two configs differ.
std::string config_difference(const Config& file, const Config& expected) {
  const json a = config_to_json(file), b = config_to_json(expected);
  for (const auto& [key, value] : b.items()) {
    if (a.at(key) != value) {
      return "config mismatch: the file has " + key + " " + a.at(key).dump() + ", expected " +
             value.dump();
    }
  }
  return {};
}

}  // namespace

Result<ModelFile> load_safetensors(std::span<const uint8_t> bytes) {
  using R = Result<ModelFile>;
  Result<FileHeader> header = parse_header(bytes);
  if (!header.ok()) return R::failure(header.error());
  Result<Config> config = config_from_metadata(header.value());
  if (!config.ok()) return R::failure(config.error());
  Result<Weights> weights = weights_from_hf_tensors(header.value().tensors, config.value());
  if (!weights.ok()) return R::failure(weights.error());
  return ModelFile{std::move(config).value(), std::move(weights).value()};
}

Result<Weights> load_safetensors(std::span<const uint8_t> bytes, const Config& expected) {
  using R = Result<Weights>;
  Result<FileHeader> header = parse_header(bytes);
  if (!header.ok()) return R::failure(header.error());
  Result<Config> config = config_from_metadata(header.value());
  if (!config.ok()) return R::failure(config.error());
  if (std::string error = config_difference(config.value(), expected); !error.empty()) {
    return R::failure(error);
  }
  return weights_from_hf_tensors(header.value().tensors, config.value());
}

Result<ModelFile> load_safetensors_file(const std::string& path) {
  Result<std::vector<uint8_t>> bytes = read_file_bytes(path);
  if (!bytes.ok()) return Result<ModelFile>::failure(bytes.error());
  Result<ModelFile> model = load_safetensors(bytes.value());
  if (!model.ok()) return Result<ModelFile>::failure(path + ": " + model.error());
  return model;
}

}  // namespace kvcheck
