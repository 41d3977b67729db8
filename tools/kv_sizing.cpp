#include "tools/kv_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>

#include "model/kv_presets.h"

namespace kvcheck::cli {

namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1073741824.0;  // 2^30

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buffer[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

std::string in_units(uint64_t bytes, double unit) {
  const double v = double(bytes) / unit;
  if (v == 0) return "0.00";
  const int magnitude = int(std::floor(std::log10(v)));
  const int decimals = std::clamp(2 - magnitude, 2, 9);
  return format("%.*f", decimals, v);
}

const char* scheme_name(int kv_heads, int heads) {
  return kv_heads == heads ? "MHA" : kv_heads == 1 ? "MQA" : "GQA";
}

std::string window_text(const KvShape& s) {
  return s.window > 0 ? "sliding window " + std::to_string(s.window) : "no sliding window";
}

std::string shape_line(const KvShape& s) {
  return format(
      "%s: %d layers, hidden %d, %d query heads, %d KV heads (%s), head_dim %d, "
      "max context %d, %s\n",
      s.name.c_str(), s.n_layers, s.hidden, s.n_heads, s.n_kv_heads,
      scheme_name(s.n_kv_heads, s.n_heads), s.head_dim, s.max_context, window_text(s).c_str());
}

std::string formula_text(const SizingRequest& r) {
  const KvShape& s = r.shape;
  return "bytes = 2 (K and V) x layers x kv_heads x vector_bytes x context x batch\n" +
         format("      = 2 x %d x %d x vector_bytes x %llu x %llu\n", s.n_layers, s.n_kv_heads,
                (unsigned long long)r.context, (unsigned long long)r.batch) +
         "vector_bytes (one head's K or V at one position) = head_dim x element bytes\n"
         "  (f32 4, bf16 2, f16 2; int8: head_dim x 1 + ceil(head_dim / 32) x 4, one f32\n"
         "  scale per block of 32 elements of a head vector)\n"
         "GB = 1e9 bytes, GiB = 2^30 bytes\n";
}

std::string dtype_table(const KvSizing& z) {
  std::string out = format("%-6s %12s %12s %18s %10s %10s\n", "dtype", "vector_bytes",
                           "bytes/token", "total bytes", "GB", "GiB");
  for (const DtypeSizing& d : z.dtypes) {
    out += format("%-6s %12llu %12s %18s %10s %10s\n", sizing_dtype_name(d.dtype),
                  (unsigned long long)d.vector_bytes, group_digits(d.per_token).c_str(),
                  group_digits(d.total).c_str(), gigabytes(d.total).c_str(),
                  gibibytes(d.total).c_str());
  }
  return out;
}

std::string scheme_table(const KvSizing& z) {
  const SizingRequest& r = z.request;
  std::string out =
      format("KV heads (%s, context %llu x batch %llu):\n", sizing_dtype_name(z.scheme_dtype),
             (unsigned long long)r.context, (unsigned long long)r.batch);
  out += format("%-6s %8s %12s %18s %10s %10s  %s\n", "scheme", "kv_heads", "bytes/token",
                "total bytes", "GB", "GiB", "vs MHA");
  for (const SchemeSizing& s : z.schemes) {
    const int ratio = r.shape.n_heads / s.kv_heads;
    const std::string versus =
        ratio == 1 ? "1x" : format("%dx smaller (%d/%d)", ratio, r.shape.n_heads, s.kv_heads);
    out += format("%-6s %8d %12s %18s %10s %10s  %s%s\n", s.scheme.c_str(), s.kv_heads,
                  group_digits(s.per_token).c_str(), group_digits(s.total).c_str(),
                  gigabytes(s.total).c_str(), gibibytes(s.total).c_str(), versus.c_str(),
                  s.this_model ? "  <- this model" : "");
  }
  return out;
}

std::string window_table(const KvSizing& z) {
  const SizingRequest& r = z.request;
  const uint64_t kept = cached_tokens(r.shape, r.context);
  if (kept == r.context) {
    return format("sliding window %d does not bind at context %llu: the totals above hold\n",
                  r.shape.window, (unsigned long long)r.context);
  }
  std::string out = format(
      "sliding window %d: a sequence keeps min(%llu, %d) = %llu tokens, %.2fx less than the "
      "full context\n",
      r.shape.window, (unsigned long long)r.context, r.shape.window, (unsigned long long)kept,
      double(r.context) / double(kept));
  out += format("%-6s %18s %10s %10s\n", "dtype", "windowed bytes", "GB", "GiB");
  for (const DtypeSizing& d : z.dtypes) {
    out += format("%-6s %18s %10s %10s\n", sizing_dtype_name(d.dtype),
                  group_digits(d.windowed_total).c_str(), gigabytes(d.windowed_total).c_str(),
                  gibibytes(d.windowed_total).c_str());
  }
  return out;
}

// KV head counts to compare, most first: MHA, a GQA, the model's own, MQA.
// An MHA or MQA model gets a GQA row too, with 4 query heads per KV head (the
// lesson's grouping) where its heads allow it.
std::vector<int> scheme_heads(const KvShape& shape) {
  const int h = shape.n_heads, own = shape.n_kv_heads;
  const int gqa = own > 1 && own < h ? own : h % 4 == 0 && h / 4 > 1 ? h / 4 : h;
  std::vector<int> heads = {h, gqa, own, 1};
  std::sort(heads.begin(), heads.end(), std::greater<>());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

nlohmann::json shape_json(const KvShape& s) {
  return {{"name", s.name},
          {"n_layers", s.n_layers},
          {"hidden", s.hidden},
          {"n_heads", s.n_heads},
          {"n_kv_heads", s.n_kv_heads},
          {"head_dim", s.head_dim},
          {"max_context", s.max_context},
          {"window", s.window}};
}

}  // namespace

std::string group_digits(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int at = int(digits.size()) - 3; at > 0; at -= 3) digits.insert(size_t(at), ",");
  return digits;
}

std::string gigabytes(uint64_t bytes) {
  return in_units(bytes, kGB);
}

std::string gibibytes(uint64_t bytes) {
  return in_units(bytes, kGiB);
}

KvSizing size_kv_cache(const SizingRequest& r) {
  KvSizing z{r, {}, r.dtypes.front(), {}};
  const uint64_t kept = cached_tokens(r.shape, r.context);
  for (const SizingDtype t : r.dtypes) {
    z.dtypes.push_back({t, head_vector_bytes(r.shape.head_dim, t), kv_bytes_per_token(r.shape, t),
                        kv_bytes(r.shape, t, r.context, r.batch),
                        kv_bytes(r.shape, t, kept, r.batch)});
    if (t == SizingDtype::kBF16) z.scheme_dtype = t;
  }
  for (const int kv_heads : scheme_heads(r.shape)) {
    KvShape variant = r.shape;
    variant.n_kv_heads = kv_heads;
    z.schemes.push_back({scheme_name(kv_heads, r.shape.n_heads), kv_heads,
                         kv_bytes_per_token(variant, z.scheme_dtype),
                         kv_bytes(variant, z.scheme_dtype, r.context, r.batch),
                         kv_heads == r.shape.n_kv_heads});
  }
  return z;
}

std::string sizing_text(const KvSizing& z) {
  const SizingRequest& r = z.request;
  std::string out = shape_line(r.shape);
  out += format("context %llu tokens x batch %llu, full attention (every position kept)\n",
                (unsigned long long)r.context, (unsigned long long)r.batch);
  if (r.context > uint64_t(r.shape.max_context)) {
    out += format("note: context %llu is beyond the model's max context %d\n",
                  (unsigned long long)r.context, r.shape.max_context);
  }
  out += "\n" + formula_text(r) + "\n" + dtype_table(z) + "\n" + scheme_table(z);
  if (r.shape.window > 0) out += "\n" + window_table(z);
  return out;
}

nlohmann::json sizing_json(const KvSizing& z) {
  const SizingRequest& r = z.request;
  nlohmann::json out = {
      {"model", shape_json(r.shape)},
      {"context", r.context},
      {"batch", r.batch},
      {"cached_tokens_per_sequence", cached_tokens(r.shape, r.context)},
      {"formula", "2 * n_layers * n_kv_heads * vector_bytes * context * batch"},
      {"int8_layout", "int8 codes plus one f32 scale per block of 32 elements of a head vector"},
      {"dtypes", nlohmann::json::array()},
      {"head_schemes",
       {{"dtype", sizing_dtype_name(z.scheme_dtype)}, {"rows", nlohmann::json::array()}}}};
  for (const DtypeSizing& d : z.dtypes) {
    out["dtypes"].push_back({{"dtype", sizing_dtype_name(d.dtype)},
                             {"vector_bytes", d.vector_bytes},
                             {"bytes_per_token", d.per_token},
                             {"total_bytes", d.total},
                             {"total_gb", double(d.total) / kGB},
                             {"total_gib", double(d.total) / kGiB},
                             {"windowed_total_bytes", d.windowed_total}});
  }
  for (const SchemeSizing& s : z.schemes) {
    out["head_schemes"]["rows"].push_back({{"scheme", s.scheme},
                                           {"kv_heads", s.kv_heads},
                                           {"bytes_per_token", s.per_token},
                                           {"total_bytes", s.total},
                                           {"savings_vs_mha", r.shape.n_heads / s.kv_heads},
                                           {"this_model", s.this_model}});
  }
  return out;
}

std::string presets_text() {
  std::string out;
  for (const KvShape& s : kv_presets()) out += shape_line(s);
  return out;
}

}  // namespace kvcheck::cli
