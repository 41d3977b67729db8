// Writing a case file: the text docs/CASE_FORMAT.md specifies, which
// parse_case (properties/repro/case_file.cpp) reads back to the same case.
#include <charconv>
#include <sstream>

#include "model/command_text.h"
#include "properties/repro/case_file.h"
#include "properties/repro/case_text.h"

namespace kvcheck {

// Recording a verdict: what a case file keeps of it, and the one-line
// strings it writes.
bool RecordedVerdict::operator==(const RecordedVerdict& other) const {
  const auto key = [](const RecordedVerdict& v) {
    const Location& w = v.where;
    return std::tuple(v.outcome, w.call, w.sequence, w.position, w.layer, w.kv_head,
                      w.first_bad_position, w.last_bad_position, std::string_view(v.summary));
  };
  return key(*this) == key(other);
}

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return std::string(case_text::trim(out));
}

std::string_view outcome_name(RecordedVerdict::Outcome outcome) {
  switch (outcome) {
    case RecordedVerdict::Outcome::kPassed:
      return "passed";
    case RecordedVerdict::Outcome::kFailed:
      return "failed";
    case RecordedVerdict::Outcome::kNotApplicable:
      return "not_applicable";
  }
  return "failed";
}

RecordedVerdict::Outcome outcome_of(const Verdict& verdict) {
  if (!verdict.passed) return RecordedVerdict::Outcome::kFailed;
  return verdict.applicable ? RecordedVerdict::Outcome::kPassed
                            : RecordedVerdict::Outcome::kNotApplicable;
}

RecordedVerdict record_verdict(const Verdict& verdict) {
  RecordedVerdict r;
  r.outcome = outcome_of(verdict);
  r.where = verdict.where;
  for (int* field :
       {&r.where.call, &r.where.sequence, &r.where.position, &r.where.layer, &r.where.kv_head}) {
    if (*field < 0) *field = -1;
  }
  // The range is written as first..last, so it is kept only when whole.
  if (r.where.first_bad_position < 0 || r.where.last_bad_position < 0) {
    r.where.first_bad_position = r.where.last_bad_position = -1;
  }
  r.summary = one_line(verdict.summary);
  r.trace = verdict.trace;
  return r;
}

std::string exact_text(double value) {
  char buffer[40];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

namespace {

// The model, engine, sequences and schedule of a case; `comments` heads
// each part with a comment line, and `model_lines` go first in the model's.
void print_scenario(std::ostream& out, const Scenario& s, bool comments,
                    const std::string& model_lines) {
  const Config& config = s.config;
  if (comments) out << "\n# model\n";
  out << model_lines;
  out << "family " << family_name(config.family) << "\n";
  out << "n_layers " << config.n_layers << "\n";
  out << "d_model " << config.d_model << "\n";
  out << "n_heads " << config.n_heads << "\n";
  out << "n_kv_heads " << config.n_kv_heads << "\n";
  out << "head_dim " << config.head_dim << "\n";
  out << "d_ff " << config.d_ff << "\n";
  out << "vocab " << config.vocab << "\n";
  out << "max_pos " << config.max_pos << "\n";
  out << "rope_theta " << exact_text(config.rope_theta) << "\n";
  out << "norm_eps " << exact_text(config.norm_eps) << "\n";
  out << "qkv_bias " << (config.qkv_bias ? "true" : "false") << "\n";
  if (config.sliding_window > 0) {
    out << "sliding_window " << config.sliding_window << "\n";
    out << "sliding_window_pattern " << config.sliding_window_pattern << "\n";
  }
  out << "weight_seed " << s.weight_seed << "\n";
  if (comments) out << "\n# engine\n";
  out << "capacity " << s.capacity << "\n";
  out << "max_rows " << s.max_rows << "\n";
  out << "kv_dtype " << kv_dtype_name(s.kv_dtype) << "\n";
  // Optional: absent means contiguous storage (files before paging stay valid).
  if (s.block_size > 0) out << "block_size " << s.block_size << "\n";
  if (s.pool_blocks > 0) out << "pool_blocks " << s.pool_blocks << "\n";
  if (s.prefix_cache) out << "prefix_cache 1\n";
  if (s.prompt_logits) out << "prompt_logits 1\n";
  if (comments) out << "\n# sequences: token ids in feed order\n";
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    out << "sequence s" << i << ":";
    for (int32_t token : s.sequences[i]) out << " " << token;
    out << "\n";
  }
  // Optional: only keyed sequences (files before cache keys stay valid).
  for (size_t i = 0; i < s.cache_keys.size(); ++i) {
    if (s.cache_keys[i] != 0) out << "cache_key s" << i << " " << s.cache_keys[i] << "\n";
  }
  if (comments) out << "\n# schedule: one engine call per line, in order\n";
  for (const Call& call : s.calls) out << call.to_text() << "\n";
}

void print_verdict(std::ostream& out, const RecordedVerdict& v) {
  const Location& w = v.where;
  out << "\n# the verdict seen when this file was written\n";
  out << "verdict " << outcome_name(v.outcome) << "\n";
  std::string where;
  const auto add = [&](const char* name, int value) {
    if (value >= 0) where += std::string(" ") + name + "=" + std::to_string(value);
  };
  add("call", w.call);
  add("sequence", w.sequence);
  add("position", w.position);
  add("layer", w.layer);
  add("kv_head", w.kv_head);
  if (w.first_bad_position >= 0 && w.last_bad_position >= 0) {
    where += " positions=" + std::to_string(w.first_bad_position) + ".." +
             std::to_string(w.last_bad_position);
  }
  if (!where.empty()) out << "where" << where << "\n";
  if (!v.summary.empty()) out << "summary " << v.summary << "\n";
  if (v.trace.empty()) return;
  out << "# where the engine's code failed, innermost last (its traceback):\n";
  for (size_t at = 0; at < v.trace.size();) {
    size_t end = v.trace.find('\n', at);
    if (end == std::string::npos) end = v.trace.size();
    out << "#   " << one_line(v.trace.substr(at, end - at)) << "\n";
    at = end + 1;
  }
}

void print_prelude(std::ostream& out, const std::vector<PreludeCase>& prelude) {
  out << "\n# prelude: cases that run first, in this order, in the same fresh engine\n"
         "# process as the case (replay and shrink run them before it)\n";
  for (const PreludeCase& p : prelude) {
    out << "prelude begin\nproperty " << property_name(p.property) << "\n";
    print_scenario(out, p.scenario, false, "");
    out << "prelude end\n";
  }
}

}  // namespace

std::string case_command_options(const CaseFile& c) {
  std::string options;
  if (backend_runs_named_code(c.backend)) options += " --backend " + shell_quote(c.backend);
  if (backend_runs_named_code(c.reference)) options += " --reference " + shell_quote(c.reference);
  if (!c.model_path.empty()) options += " --model " + shell_quote(c.model_path);
  return options;
}

std::string print_case(const CaseFile& c) {
  std::ostringstream out;
  out << kCaseMagic << "\n";
  out << "# A kvcheck case (docs/CASE_FORMAT.md). Replay: kvcheck replay" << case_command_options(c)
      << " FILE\n";
  for (const std::string& note : c.notes) out << "note " << note << "\n";
  out << "property " << property_name(c.property) << "\n";
  out << "fault " << c.faults.to_string() << "\n";
  if (!c.backend.empty()) out << "backend " << c.backend << "\n";
  if (!c.reference.empty()) out << "reference " << c.reference << "\n";
  if (!c.engine.empty()) out << "engine " << c.engine << "\n";
  std::string model_lines;
  if (!c.model_path.empty()) {
    model_lines =
        "# a --model checkpoint: the config below is its config.json, weight_seed is "
        "unused\nmodel " +
        c.model_path + "\nmodel_hash " + c.model_hash + "\n";
  }
  print_scenario(out, c.scenario, true, model_lines);
  if (c.has_verdict) print_verdict(out, c.verdict);
  if (!c.prelude.empty()) print_prelude(out, c.prelude);
  return out.str();
}

}  // namespace kvcheck
