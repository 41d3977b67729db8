#include "tools/backends.h"

#include <sstream>
#include <string>

#include "backends/in_tree.h"
#include "model/status.h"

namespace kvcheck::cli {

std::vector<Backend> chosen_backends(const std::vector<std::string>& names) {
  const std::vector<std::string> wanted = names.empty() ? default_backend_names() : names;
  std::vector<Backend> out;
  for (const std::string& name : wanted) out.push_back(backend_registry().resolve(name));
  return out;
}

std::shared_ptr<const EngineUnderTest> reference_engine(const std::string& name) {
  if (name.empty()) return nullptr;
  return std::make_shared<const EngineUnderTest>(backend_registry().resolve(name).under_test());
}

EngineUnderTest engine_under_test(const Backend& backend, FaultSet faults,
                                  std::shared_ptr<const EngineUnderTest> reference) {
  if (faults.any() && !backend.traits.operations.fault_switches) {
    throw InputError("--fault " + faults.to_string() + ": backend " + backend.spec +
                     " has no fault switches (only the in-tree engines do)");
  }
  EngineUnderTest subject = backend.under_test(faults);
  subject.reference = std::move(reference);
  return subject;
}

namespace {

std::string yes_no(bool on, const char* what) {
  return std::string(on ? "" : "no ") + what;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The shape rules beyond ranges, as the limits line's tail ("" when none).
std::string shape_rules(const ShapeLimits& l) {
  std::vector<std::string> rules;
  const auto families = [](const std::vector<Family>& list) {
    std::vector<std::string> names;
    for (Family f : list) names.push_back(family_name(f));
    return join_names(names);
  };
  if (l.mha_only) rules.push_back("MHA only");
  if (!l.query_width_is_d_model.empty())
    rules.push_back("heads x head_dim = d_model (" + families(l.query_width_is_d_model) + ")");
  if (!l.d_ff_is_4x_d_model.empty())
    rules.push_back("d_ff = 4 x d_model (" + families(l.d_ff_is_4x_d_model) + ")");
  std::string out;
  for (const std::string& r : rules) out += "; " + r;
  return out;
}

}  // namespace

std::string traits_summary(const EngineTraits& t, const std::string& indent) {
  std::ostringstream out;
  const OperationTraits& op = t.operations;
  out << indent << "engine:      " << t.identity.name << " " << t.identity.version << "\n";
  out << indent << "operations:  "
      << join_names(
             {yes_no(op.multi_sequence_step, "multi-sequence steps"), yes_no(op.finish, "finish"),
              yes_no(op.reset, "reset"), yes_no(op.cache_snapshot, "cache snapshots"),
              yes_no(op.capacity_refusal, "capacity refusal"),
              yes_no(op.fault_switches, "fault switches"), yes_no(op.storage_map, "storage map"),
              yes_no(op.fork, "fork"), yes_no(op.truncate, "truncate"),
              yes_no(op.paged, "paged storage"), yes_no(op.pool_report, "pool report"),
              yes_no(op.storage_check, "storage check"), yes_no(op.prefix_cache, "prefix cache"),
              yes_no(op.sliding_window, "sliding window"), yes_no(op.erase, "erase"),
              yes_no(op.shift, "shift"), yes_no(op.div, "div")})
      << "\n";
  const ShapeLimits& l = t.limits;
  std::vector<std::string> families, dtypes;
  for (Family f : l.families) families.push_back(family_name(f));
  for (KvDtype d : l.kv_dtypes) dtypes.push_back(kv_dtype_name(d));
  out << indent << "limits:      families " << join_names(families) << "; kv " << join_names(dtypes)
      << "; head_dim " << l.min_head_dim << ".." << l.max_head_dim << " (multiple of "
      << l.head_dim_multiple << "); vocab " << l.min_vocab << ".." << l.max_vocab
      << "; rows <= " << l.max_rows << "; capacity <= " << l.max_capacity
      << (l.capacity_shared ? " shared by all sequences" : " per sequence") << shape_rules(l)
      << "\n";
  const InvarianceTraits& i = t.invariance;
  out << indent << "invariance:  chunking " << invariance_name(i.chunking) << ", batch "
      << invariance_name(i.batch) << ", reset " << invariance_name(i.reset) << ", compaction "
      << invariance_name(i.compaction) << ", gqa twin " << invariance_name(i.gqa_twin)
      << ", determinism " << invariance_name(i.determinism) << "\n";
  const ArithmeticTraits& a = t.arithmetic;
  out << indent << "arithmetic:  " << precision_name(a.accumulation) << " accumulation, "
      << precision_name(a.activations) << " activations"
      << (a.rope_angles_in_float ? ", RoPE angles in float" : "")
      << (a.weights != Precision::kF32 ? std::string(", ") + precision_name(a.weights) + " weights"
                                       : "")
      << (a.queries_rounded_to_kv_dtype ? ", queries rounded to the cache dtype" : "")
      << (a.kv_read != Precision::kF32 ? std::string(", K/V read in ") + precision_name(a.kv_read)
                                       : "")
      << (a.probabilities_rounded_to_kv_dtype ? ", probabilities rounded to V's type" : "")
      << (a.online_softmax ? ", online softmax" : "")
      << (a.value_accumulation != Precision::kF32
              ? std::string(", values summed in ") + precision_name(a.value_accumulation)
              : "")
      << (a.kv_quantizer != KvQuantizer::kKvcheck
              ? std::string(", ") + kv_quantizer_name(a.kv_quantizer) + " quantizer"
              : "")
      << (a.v_dtype ? std::string(", V stored in ") + kv_dtype_name(*a.v_dtype) : "") << "\n";
  return out.str();
}

}  // namespace kvcheck::cli
