// What `kvcheck memory` prints: a model's KV-cache size across dtypes and KV
// head schemes, with and without its sliding window, as text and as JSON.
// The arithmetic is model/kv_memory.h; this file only lays it out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/kv_memory.h"

namespace kvcheck::cli {

struct SizingRequest {
  KvShape shape;                    // validated
  uint64_t context = 0;             // tokens per sequence
  uint64_t batch = 1;               // sequences
  std::vector<SizingDtype> dtypes;  // at least one
};

struct DtypeSizing {
  SizingDtype dtype;
  uint64_t vector_bytes = 0;    // one head's K or V at one position
  uint64_t per_token = 0;       // one sequence, every layer, K and V
  uint64_t total = 0;           // context x batch
  uint64_t windowed_total = 0;  // min(context, window) x batch; = total without a window
};

struct SchemeSizing {
  std::string scheme;  // MHA, GQA or MQA
  int kv_heads = 0;
  uint64_t per_token = 0;
  uint64_t total = 0;
  bool this_model = false;
};

struct KvSizing {
  SizingRequest request;
  std::vector<DtypeSizing> dtypes;    // [request.dtypes]
  SizingDtype scheme_dtype;           // bf16 when requested, else the first
  std::vector<SchemeSizing> schemes;  // MHA, the model's GQA if any, MQA
};

// Throws InputError when a size does not fit in 64 bits.
KvSizing size_kv_cache(const SizingRequest& request);

std::string sizing_text(const KvSizing& sizing);
nlohmann::json sizing_json(const KvSizing& sizing);

// The presets, one line each.
std::string presets_text();

// "17,179,869,184"
std::string group_digits(uint64_t value);
// Bytes in GB (1e9) or GiB (2^30), at least two decimals and three
// significant digits: "17.18", "16.00", "0.134".
std::string gigabytes(uint64_t bytes);
std::string gibibytes(uint64_t bytes);

}  // namespace kvcheck::cli
