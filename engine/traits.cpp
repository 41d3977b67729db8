// What a declared trait allows: validate() the traits themselves, refuses()
// a model and cache shape, declares() an operation. Generators, properties
// and check-adapter all ask these, so a shape rule is written once.
#include "engine/traits.h"

#include <algorithm>

namespace kvcheck {

namespace {

std::string range_error(const char* field, int lo, int hi) {
  return std::string("limits.") + field + ": minimum " + std::to_string(lo) + " is above maximum " +
         std::to_string(hi);
}

bool in(const std::vector<Family>& families, Family family) {
  return std::find(families.begin(), families.end(), family) != families.end();
}

std::string multiple_error(const char* field, int value, int multiple) {
  return std::string(field) + " " + std::to_string(value) + " is not a multiple of " +
         std::to_string(multiple);
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kF32:
      return "f32";
    case Precision::kF16:
      return "f16";
    case Precision::kBF16:
      return "bf16";
  }
  return "?";
}

const char* kv_quantizer_name(KvQuantizer q) {
  return q == KvQuantizer::kGgml ? "ggml" : "kvcheck";
}

const char* invariance_name(Invariance i) {
  return i == Invariance::kBitwise ? "bitwise" : "bounded";
}

const char* positions_name(Family family) {
  return family == Family::kGpt2 ? "learned" : "rope";
}

void apply_shape_rules(Config& c, const ShapeLimits& limits) {
  if (in(limits.query_width_is_d_model, c.family)) c.d_model = c.n_heads * c.head_dim;
  if (in(limits.d_ff_is_4x_d_model, c.family)) c.d_ff = 4 * c.d_model;
  if (limits.mha_only) c.n_kv_heads = c.n_heads;
}

bool accepts_family(const ShapeLimits& limits, Family family) {
  return std::find(limits.families.begin(), limits.families.end(), family) != limits.families.end();
}

bool declares(const OperationTraits& op, std::string_view needs) {
  if (needs == "truncate") return op.truncate;
  if (needs == "paged") return op.paged && op.fork;
  if (needs == "storage_check") return op.storage_check && op.reset;
  if (needs == "prefix_cache") return op.prefix_cache && op.paged;
  if (needs == "abort") return op.abort && op.prefix_cache && op.paged;
  if (needs == "cache_keys") return op.cache_keys && op.prefix_cache && op.paged;
  if (needs == "prompt_logits") return op.prompt_logits && op.prefix_cache && op.paged;
  if (needs == "offload") return op.offload && op.paged && op.pool_report;
  if (needs == "sliding_window") return op.sliding_window;
  if (needs == "shift") return op.erase && op.shift;
  if (needs == "div") return op.div;
  if (needs == "save_restore") return op.save_restore;
  return needs.empty();
}

bool declares(const EngineTraits& traits, std::string_view needs) {
  if (needs == "q8_0") return accepts_kv_dtype(traits.limits, KvDtype::kQ8_0);
  return declares(traits.operations, needs);
}

bool accepts_kv_dtype(const ShapeLimits& limits, KvDtype dtype) {
  return std::find(limits.kv_dtypes.begin(), limits.kv_dtypes.end(), dtype) !=
         limits.kv_dtypes.end();
}

std::string EngineTraits::validate() const {
  const ShapeLimits& l = limits;
  if (identity.name.empty()) return "identity.name: empty";
  if (l.families.empty()) return "limits.families: empty (the engine accepts no model)";
  if (l.kv_dtypes.empty()) return "limits.kv_dtypes: empty (the engine stores no K/V)";
  if (l.min_head_dim < 1) return "limits.min_head_dim: " + std::to_string(l.min_head_dim) + " < 1";
  if (l.min_head_dim > l.max_head_dim)
    return range_error("head_dim", l.min_head_dim, l.max_head_dim);
  if (l.head_dim_multiple < 1)
    return "limits.head_dim_multiple: " + std::to_string(l.head_dim_multiple) + " < 1";
  for (const int d : l.head_dims) {
    if (d < 1) return "limits.head_dims: " + std::to_string(d) + " < 1";
  }
  if (l.min_vocab < 1) return "limits.min_vocab: " + std::to_string(l.min_vocab) + " < 1";
  if (l.min_vocab > l.max_vocab) return range_error("vocab", l.min_vocab, l.max_vocab);
  if (l.max_layers < 1) return "limits.max_layers: " + std::to_string(l.max_layers) + " < 1";
  if (l.min_d_model < 1) return "limits.min_d_model: " + std::to_string(l.min_d_model) + " < 1";
  if (l.min_d_model > l.max_d_model) return range_error("d_model", l.min_d_model, l.max_d_model);
  if (l.d_model_multiple < 1)
    return "limits.d_model_multiple: " + std::to_string(l.d_model_multiple) + " < 1";
  if (l.max_capacity < 1) return "limits.max_capacity: " + std::to_string(l.max_capacity) + " < 1";
  if (l.max_rows < 1) return "limits.max_rows: " + std::to_string(l.max_rows) + " < 1";
  if (l.max_step_tokens < 1)
    return "limits.max_step_tokens: " + std::to_string(l.max_step_tokens) + " < 1";
  if (l.max_head_dim / l.head_dim_multiple * l.head_dim_multiple < l.min_head_dim)
    return "limits.head_dim_multiple: no multiple of " + std::to_string(l.head_dim_multiple) +
           " lies in [" + std::to_string(l.min_head_dim) + ", " + std::to_string(l.max_head_dim) +
           "]";
  if (arithmetic.accumulation != Precision::kF32 && arithmetic.activations == Precision::kF32)
    return std::string("arithmetic: accumulation in ") + precision_name(arithmetic.accumulation) +
           " with f32 activations is contradictory (activations are sums)";
  return "";
}

std::string EngineTraits::refuses(const Config& c, KvDtype kv_dtype, int capacity,
                                  int max_rows) const {
  const ShapeLimits& l = limits;
  if (!accepts_family(l, c.family))
    return std::string("family ") + family_name(c.family) + " (" + positions_name(c.family) +
           " positions)";
  if (!accepts_kv_dtype(l, kv_dtype)) return std::string("kv_dtype ") + kv_dtype_name(kv_dtype);
  if (c.head_dim < l.min_head_dim || c.head_dim > l.max_head_dim)
    return "head_dim " + std::to_string(c.head_dim) + " outside [" +
           std::to_string(l.min_head_dim) + ", " + std::to_string(l.max_head_dim) + "]";
  if (c.head_dim % l.head_dim_multiple != 0)
    return multiple_error("head_dim", c.head_dim, l.head_dim_multiple);
  if (c.vocab < l.min_vocab || c.vocab > l.max_vocab)
    return "vocab " + std::to_string(c.vocab) + " outside [" + std::to_string(l.min_vocab) + ", " +
           std::to_string(l.max_vocab) + "]";
  if (c.n_layers > l.max_layers)
    return "n_layers " + std::to_string(c.n_layers) + " above " + std::to_string(l.max_layers);
  if (c.d_model < l.min_d_model || c.d_model > l.max_d_model)
    return "d_model " + std::to_string(c.d_model) + " outside [" + std::to_string(l.min_d_model) +
           ", " + std::to_string(l.max_d_model) + "]";
  if (c.d_model % l.d_model_multiple != 0)
    return multiple_error("d_model", c.d_model, l.d_model_multiple);
  if (in(l.query_width_is_d_model, c.family) && c.n_heads * c.head_dim != c.d_model)
    return "n_heads*head_dim " + std::to_string(c.n_heads * c.head_dim) + " differs from d_model " +
           std::to_string(c.d_model) + " (limits.query_width_is_d_model)";
  if (in(l.d_ff_is_4x_d_model, c.family) && c.d_ff != 4 * c.d_model)
    return "d_ff " + std::to_string(c.d_ff) + " differs from 4 x d_model " +
           std::to_string(4 * c.d_model) + " (limits.d_ff_is_4x_d_model)";
  if (l.mha_only && c.n_kv_heads != c.n_heads)
    return "n_kv_heads " + std::to_string(c.n_kv_heads) + " differs from n_heads " +
           std::to_string(c.n_heads) + " (limits.mha_only)";
  if (c.sliding_window > 0 && !operations.sliding_window)
    return "sliding_window " + std::to_string(c.sliding_window) + " (sliding windows)";
  if (capacity > l.max_capacity)
    return "capacity " + std::to_string(capacity) + " above " + std::to_string(l.max_capacity);
  if (max_rows > l.max_rows)
    return "max_rows " + std::to_string(max_rows) + " above " + std::to_string(l.max_rows);
  return "";
}

EngineTraits EngineTraits::strict() {
  return EngineTraits{};
}

}  // namespace kvcheck
