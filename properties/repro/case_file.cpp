// Reading a case file: the parser of the format docs/CASE_FORMAT.md
// specifies (its words and numbers: case_text.h; writing: case_print.cpp).
#include "properties/repro/case_file.h"

#include "properties/repro/case_text.h"
#include "properties/schedule/operation.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

namespace kvcheck {

namespace {

using namespace case_text;  // NOLINT: the lexer of this one format

// What the whole file may ask the parser to hold, the prelude blocks
// included (kMaxCase* in case_file.h).
struct Budget {
  int tokens = 0;
  int calls = 0;
};

class Parser {
 public:
  Parser() = default;
  // The parser of a prelude block begun on `begin_line`, spending the file's
  // budget.
  Parser(Budget* budget, int begin_line) : budget_(budget), block_begin_(begin_line) {}

  CaseFile parse(std::string_view text) {
    if (text.size() > kMaxCaseBytes) {
      fail_at(0, "the file has " + std::to_string(text.size()) + " bytes; expected at most " +
                     std::to_string(kMaxCaseBytes));
    }
    int line_number = 0;
    while (!text.empty()) {
      const size_t end = text.find('\n');
      std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line_number == 1) {
        read_magic(line);
        continue;
      }
      line = trim(line);
      if (line.empty() || line.front() == '#') continue;
      read_line(line_number, line);
    }
    if (line_number == 0)
      fail_at(1, "the file is empty; expected the first line \"kvcheck-case 1\"");
    last_line_ = line_number;
    return finish();
  }

 private:
  void read_magic(std::string_view line) {
    const std::string_view trimmed = trim(line);
    if (trimmed == kCaseMagic) return;
    std::string_view rest = trimmed;
    if (next_word(rest) == "kvcheck-case") {
      fail_at(1, "unsupported case format version " + quoted(rest) +
                     "; expected \"kvcheck-case 1\" (this kvcheck reads version 1)");
    }
    fail_at(1, "expected the first line \"kvcheck-case 1\", got " + quoted(line));
  }

  void once(int line, std::string_view key) {
    const auto [it, inserted] = index_.key_line.emplace(std::string(key), line);
    if (!inserted) {
      fail_at(line, std::string(key) + ": given twice (first on line " +
                        std::to_string(it->second) + "); expected it once");
    }
  }

  void read_line(int line, std::string_view text) {
    std::string_view rest = text;
    const std::string_view key = next_word(rest);
    if (key == "prelude") return read_prelude_marker(line, rest);
    if (block_) return block_->read_block_line(line, key, rest);
    read_key(line, key, rest);
  }

  // "prelude begin" opens a block of lines that is one prelude case, up to
  // "prelude end"; a second parser reads it with the same keys.
  void read_prelude_marker(int line, std::string_view rest) {
    const std::string_view word = next_word(rest);
    expect_end(line, "prelude", rest);
    if (word == "begin") {
      if (block_) {
        fail_at(line, "prelude begin: the prelude block begun on line " +
                          std::to_string(block_->block_begin_) +
                          " is still open; expected "
                          "\"prelude end\" first");
      }
      if (static_cast<int>(c_.prelude.size()) == kMaxCasePrelude) {
        fail_at(line, "prelude: more than " + std::to_string(kMaxCasePrelude) + " prelude cases");
      }
      block_ = std::make_unique<Parser>(budget_, line);
    } else if (word == "end") {
      if (!block_)
        fail_at(line, "prelude end: no prelude block is open; expected \"prelude begin\" first");
      CaseFile block = block_->finish_block(line);
      c_.prelude.push_back({block.property, std::move(block.scenario)});
      prelude_lines_.push_back(block_->block_begin_);
      block_.reset();
    } else {
      fail_at(line, "prelude: expected begin or end, got " + quoted(word));
    }
  }

  // A line of a prelude block: the keys of a case's property, model, engine,
  // sequences and calls; what describes the whole case belongs to it alone.
  void read_block_line(int line, std::string_view key, std::string_view rest) {
    for (const char* only : {"note", "fault", "backend", "engine", "reference", "model",
                             "model_hash", "verdict", "where", "summary"}) {
      if (key == only) {
        fail_at(line, std::string(key) + ": not allowed in a prelude block (begun on line " +
                          std::to_string(block_begin_) +
                          "): a prelude case runs on the case's backend, faults and model and "
                          "records no verdict; expected property, the model and engine "
                          "fields, sequence and the calls");
      }
    }
    read_key(line, key, rest);
  }

  void read_key(int line, std::string_view key, std::string_view rest) {
    if (!read_case_key(line, key, rest) && !read_scenario_key(line, key, rest)) {
      std::string calls;
      for (const Operation& op : operations()) calls += std::string(op.keyword) + ", ";
      fail_at(line, "unknown key " + quoted(key) +
                        "; expected one of note, property, fault, backend, engine, reference, "
                        "model, model_hash, the model and engine fields (family ... kv_dtype, "
                        "sliding_window, sliding_window_pattern, block_size, pool_blocks, "
                        "prefix_cache, prompt_logits), sequence, cache_key, " +
                        calls + "verdict, where, summary, prelude (docs/CASE_FORMAT.md)");
    }
  }

  // The keys about the case: what was checked where, and what it gave.
  bool read_case_key(int line, std::string_view key, std::string_view rest) {
    if (key == "note") {
      if (static_cast<int>(c_.notes.size()) == kMaxCaseNotes) {
        fail_at(line, "note: more than " + std::to_string(kMaxCaseNotes) + " notes");
      }
      c_.notes.push_back(std::string(rest));
    } else if (key == "property") {
      once(line, key);
      const std::string_view name = next_word(rest);
      expect_end(line, key, rest);
      const std::optional<Property> p = parse_property(name);
      if (!p) {
        fail_at(line, "property: unknown property " + quoted(name) + "; expected one of " +
                          property_choices() + " (or P1..P" + std::to_string(kPropertyCount) + ")");
      }
      c_.property = *p;
    } else if (key == "fault") {
      once(line, key);
      read_faults(line, next_word(rest));
      expect_end(line, key, rest);
    } else if (key == "backend" || key == "engine" || key == "reference") {
      // The rest of the line: a backend string may hold a path, options
      // ("plugin:./x.so?bug=restart_positions") or a command with spaces.
      once(line, key);
      const std::string value = one_line(rest);
      if (value.empty()) {
        fail_at(line, key == "engine"
                          ? "engine: expected the engine's name and version"
                          : std::string(key) + ": expected a backend string (e.g. cpu)");
      }
      if (value.size() > 1000) fail_at(line, std::string(key) + ": longer than 1000 characters");
      (key == "backend" ? c_.backend : key == "engine" ? c_.engine : c_.reference) = value;
    } else if (key == "model") {
      // The rest of the line: a path may hold spaces.
      once(line, key);
      c_.model_path = one_line(rest);
      if (c_.model_path.empty()) fail_at(line, "model: expected the checkpoint folder's path");
      if (c_.model_path.size() > 4096) fail_at(line, "model: longer than 4096 characters");
    } else if (key == "model_hash") {
      once(line, key);
      const std::string_view hash = next_word(rest);
      expect_end(line, key, rest);
      read_model_hash(line, hash);
    } else if (key == "verdict") {
      once(line, key);
      const std::string_view outcome = next_word(rest);
      expect_end(line, key, rest);
      if (outcome == "failed") {
        c_.verdict.outcome = RecordedVerdict::Outcome::kFailed;
      } else if (outcome == "passed") {
        c_.verdict.outcome = RecordedVerdict::Outcome::kPassed;
      } else if (outcome == "not_applicable") {
        c_.verdict.outcome = RecordedVerdict::Outcome::kNotApplicable;
      } else {
        fail_at(line, "verdict: expected failed, passed or not_applicable, got " + quoted(outcome));
      }
      c_.has_verdict = true;
    } else if (key == "where") {
      once(line, key);
      read_where(line, rest);
    } else if (key == "summary") {
      once(line, key);
      c_.verdict.summary = std::string(rest);
    } else {
      return false;
    }
    return true;
  }

  // The keys of the scenario: the model, the engine's options, the
  // sequences and the calls.
  bool read_scenario_key(int line, std::string_view key, std::string_view rest) {
    if (is_config_key(key) || is_engine_key(key)) {
      once(line, key);
      const std::string_view value = next_word(rest);
      expect_end(line, key, rest);
      read_model_field(line, key, value);
    } else if (key == "weights_file") {
      fail_at(line,
              "weights_file: loading weights from a file is not supported by case format "
              "1; expected weight_seed <integer> (docs/CASE_FORMAT.md)");
    } else if (key == "sequence") {
      read_sequence(line, rest);
    } else if (key == "cache_key") {
      read_cache_key(line, rest);
    } else if (key == "prefix_cache") {
      once(line, key);
      const std::string_view value = next_word(rest);
      expect_end(line, key, rest);
      c_.scenario.prefix_cache = parse_int(line, key, value, 0, 1) == 1;
    } else if (key == "prompt_logits") {
      once(line, key);
      const std::string_view value = next_word(rest);
      expect_end(line, key, rest);
      c_.scenario.prompt_logits = parse_int(line, key, value, 0, 1) == 1;
    } else if (key == "sliding_window" || key == "sliding_window_pattern") {
      // Optional config keys (absent = 0): files without a window stay valid.
      once(line, key);
      const std::string_view value = next_word(rest);
      expect_end(line, key, rest);
      Config& config = c_.scenario.config;
      (key == "sliding_window" ? config.sliding_window : config.sliding_window_pattern) =
          parse_int(line, key, value, 0);
    } else if (key == "block_size" || key == "pool_blocks") {
      once(line, key);
      const std::string_view value = next_word(rest);
      expect_end(line, key, rest);
      (key == "block_size" ? c_.scenario.block_size : c_.scenario.pool_blocks) =
          parse_int(line, key, value, 0, key == "block_size" ? 32 : (1 << 20));
    } else if (key == "step") {
      read_step(line, rest);
    } else if (const Operation* op = find_operation(key)) {
      read_call(line, *op, rest);
    } else {
      return false;
    }
    return true;
  }

  static void expect_end(int line, std::string_view key, std::string_view rest) {
    if (!rest.empty()) {
      fail_at(line, std::string(key) + ": unexpected " + quoted(rest) + " after the value");
    }
  }

  // "fnv1a64:" and 16 lowercase hex digits, as load_hf_checkpoint writes it.
  void read_model_hash(int line, std::string_view hash) {
    constexpr std::string_view kPrefix = "fnv1a64:";
    bool ok = hash.size() == kPrefix.size() + 16 && hash.starts_with(kPrefix);
    for (size_t i = kPrefix.size(); ok && i < hash.size(); ++i) {
      ok = std::isdigit(static_cast<unsigned char>(hash[i])) || (hash[i] >= 'a' && hash[i] <= 'f');
    }
    if (!ok) {
      fail_at(line, "model_hash: expected fnv1a64:<16 lowercase hex digits>, got " + quoted(hash));
    }
    c_.model_hash = std::string(hash);
  }

  void read_faults(int line, std::string_view names) {
    const Result<FaultSet> faults = parse_fault_list(names);
    if (!faults.ok()) fail_at(line, "fault: " + faults.error());
    c_.faults = faults.value();
  }

  void read_model_field(int line, std::string_view key, std::string_view value) {
    Config& config = c_.scenario.config;
    Scenario& s = c_.scenario;
    const auto int_field = [&](int& out) { out = parse_int(line, key, value, 0); };
    if (key == "family") {
      const Result<Family> family = parse_family(std::string(value));
      if (!family) fail_at(line, "family: expected gpt2 or llama, got " + quoted(value));
      config.family = family.value();
    } else if (key == "n_layers") {
      int_field(config.n_layers);
    } else if (key == "d_model") {
      int_field(config.d_model);
    } else if (key == "n_heads") {
      int_field(config.n_heads);
    } else if (key == "n_kv_heads") {
      int_field(config.n_kv_heads);
    } else if (key == "head_dim") {
      int_field(config.head_dim);
    } else if (key == "d_ff") {
      int_field(config.d_ff);
    } else if (key == "vocab") {
      int_field(config.vocab);
    } else if (key == "max_pos") {
      int_field(config.max_pos);
    } else if (key == "rope_theta") {
      config.rope_theta = parse_double(line, key, value);
    } else if (key == "norm_eps") {
      config.norm_eps = parse_double(line, key, value);
    } else if (key == "qkv_bias") {
      if (value != "true" && value != "false") {
        fail_at(line, "qkv_bias: expected true or false, got " + quoted(value));
      }
      config.qkv_bias = value == "true";
    } else if (key == "weight_seed") {
      s.weight_seed = parse_u64(line, key, value);
    } else if (key == "capacity") {
      int_field(s.capacity);
    } else if (key == "max_rows") {
      int_field(s.max_rows);
    } else if (key == "kv_dtype") {
      const Result<KvDtype> dtype = parse_kv_dtype(std::string(value));
      if (!dtype) {
        fail_at(line,
                std::string("kv_dtype: expected ") + kv_dtype_names() + ", got " + quoted(value));
      }
      s.kv_dtype = dtype.value();
    }
  }

  // "cache_key sN K": sequence N's cache key, after its sequence line.
  void read_cache_key(int line, std::string_view rest) {
    const int s = parse_sequence_ref(line, "cache_key", next_word(rest));
    const int known = static_cast<int>(c_.scenario.sequences.size());
    if (s >= known) {
      fail_at(line, "cache_key: s" + std::to_string(s) + " comes before its sequence line (" +
                        std::to_string(known) + " sequences so far)");
    }
    const uint32_t key = uint32_t(parse_int(line, "cache_key", next_word(rest), 0));
    expect_end(line, "cache_key", rest);
    std::vector<uint32_t>& keys = c_.scenario.cache_keys;
    if (keys.size() <= size_t(s)) keys.resize(size_t(s) + 1, 0);
    keys[size_t(s)] = key;
  }

  void read_sequence(int line, std::string_view rest) {
    std::vector<std::vector<int32_t>>& sequences = c_.scenario.sequences;
    const int expected = static_cast<int>(sequences.size());
    const std::string_view label = next_word(rest);
    if (label.empty() || label.back() != ':') {
      fail_at(line, "sequence: expected \"sequence s" + std::to_string(expected) +
                        ": <token ids>\", got " + quoted(label));
    }
    const int s = parse_sequence_ref(line, "sequence", label.substr(0, label.size() - 1));
    if (s != expected) {
      fail_at(line, "sequence: expected s" + std::to_string(expected) +
                        " (sequences are listed in order from s0), got s" + std::to_string(s));
    }
    if (expected == kMaxCaseSequences) {
      fail_at(line, "sequence: more than " + std::to_string(kMaxCaseSequences) + " sequences");
    }
    std::vector<int32_t> tokens;
    while (!rest.empty()) {
      if (budget_->tokens == kMaxCaseTokens) {
        fail_at(line,
                "sequence: more than " + std::to_string(kMaxCaseTokens) + " tokens in the file");
      }
      tokens.push_back(parse_int(line, "token id", next_word(rest)));
      ++budget_->tokens;
    }
    sequences.push_back(std::move(tokens));
    index_.sequence_line.push_back(line);
  }

  // A schedule call other than a step: its keyword, then the arguments its
  // operation's syntax lists (properties/schedule/).
  void read_call(int line, const Operation& op, std::string_view rest) {
    Call call;
    call.kind = op.kind;
    for (const Argument& a : op.syntax) {
      const std::string_view word = next_word(rest);
      call.*a.field = a.sequence ? parse_sequence_ref(line, a.label, word)
                                 : parse_int(line, a.label, word, a.lo, a.hi);
    }
    expect_end(line, op.keyword, rest);
    add_call(line, std::move(call));
  }

  void read_step(int line, std::string_view rest) {
    std::vector<ChunkSpec> chunks;
    if (rest.empty()) fail_at(line, "step: expected one or more chunks s<index>:<length>");
    while (!rest.empty()) {
      const std::string_view chunk = next_word(rest);
      const size_t colon = chunk.find(':');
      if (colon == std::string_view::npos) {
        fail_at(line, "step: expected a chunk s<index>:<length> (e.g. s0:3), got " + quoted(chunk));
      }
      if (static_cast<int>(chunks.size()) == kMaxCaseSequences) {
        fail_at(line, "step: more than " + std::to_string(kMaxCaseSequences) + " chunks");
      }
      ChunkSpec spec;
      spec.sequence = parse_sequence_ref(line, "step", chunk.substr(0, colon));
      spec.length = parse_int(line, "step chunk length", chunk.substr(colon + 1), 1);
      chunks.push_back(spec);
    }
    add_call(line, Call::step(std::move(chunks)));
  }

  void add_call(int line, Call call) {
    if (budget_->calls == kMaxCaseCalls) {
      fail_at(line, "more than " + std::to_string(kMaxCaseCalls) + " calls in the file");
    }
    ++budget_->calls;
    c_.scenario.calls.push_back(std::move(call));
    index_.call_line.push_back(line);
  }

  void read_where(int line, std::string_view rest) {
    Location& where = c_.verdict.where;
    while (!rest.empty()) {
      const std::string_view item = next_word(rest);
      const size_t eq = item.find('=');
      const std::string_view name = item.substr(0, eq);
      const std::string_view value =
          eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
      if (eq == std::string_view::npos) {
        fail_at(line, "where: expected name=value (e.g. call=3), got " + quoted(item));
      }
      if (name == "positions") {
        const size_t dots = value.find("..");
        if (dots == std::string_view::npos) {
          fail_at(line, "where: positions: expected first..last (e.g. 0..3), got " + quoted(value));
        }
        where.first_bad_position = parse_int(line, "where positions", value.substr(0, dots));
        where.last_bad_position = parse_int(line, "where positions", value.substr(dots + 2));
        continue;
      }
      int* target = name == "call"       ? &where.call
                    : name == "sequence" ? &where.sequence
                    : name == "position" ? &where.position
                    : name == "layer"    ? &where.layer
                    : name == "kv_head"  ? &where.kv_head
                                         : nullptr;
      if (target == nullptr) {
        fail_at(line, "where: unknown field " + quoted(name) +
                          "; expected call, sequence, position, layer, kv_head or positions");
      }
      *target = parse_int(line, "where " + std::string(name), value);
    }
  }

  CaseFile finish() {
    const int end = last_line_;
    if (block_) {
      fail_at(0, "at the end of the file (line " + std::to_string(end) +
                     "): the prelude block begun on line " + std::to_string(block_->block_begin_) +
                     " is not closed; expected a line \"prelude end\"");
    }
    require_scenario("at the end of the file (line " + std::to_string(end) + ")");
    if (index_.key_line.count("model") != index_.key_line.count("model_hash")) {
      const bool has_model = index_.key_line.count("model") > 0;
      fail_at(index_.key_line.at(has_model ? "model" : "model_hash"),
              has_model ? "model: expected a line \"model_hash fnv1a64:...\" too (the hash of "
                          "the checkpoint's files)"
                        : "model_hash: expected a line \"model <folder>\" too");
    }
    const bool verdict_details =
        index_.key_line.count("where") > 0 || index_.key_line.count("summary") > 0;
    if (verdict_details && !c_.has_verdict) {
      const int line = index_.key_line.count("where") ? index_.key_line.at("where")
                                                      : index_.key_line.at("summary");
      fail_at(line,
              "where/summary describe a verdict; expected a line \"verdict failed\" (or "
              "passed, not_applicable) too");
    }
    validate("invalid scenario: ", 0);
    // A checkpoint's weights are the checkpoint's config's: every case of the
    // file runs on that one model.
    for (size_t i = 0; i < c_.prelude.size() && index_.key_line.count("model"); ++i) {
      if (!(c_.prelude[i].scenario.config == c_.scenario.config)) {
        fail_at(prelude_lines_[i],
                "prelude: this case's model differs from the case's; the "
                "prelude of a --model case runs on the same checkpoint");
      }
    }
    return std::move(c_);
  }

  // The case of a prelude block that "prelude end" on `end_line` closes.
  CaseFile finish_block(int end_line) {
    require_scenario("line " + std::to_string(end_line) + ": the prelude block begun on line " +
                     std::to_string(block_begin_));
    validate("invalid prelude case (begun on line " + std::to_string(block_begin_) + "): ",
             end_line);
    return std::move(c_);
  }

  // `where` says which part of the file misses a key.
  void require_scenario(const std::string& where) {
    for (const char* key : kConfigKeys) require(key, where);
    for (const char* key : kEngineKeys) require(key, where);
    require("property", where);
  }

  // An error is put on the line it names, else on `fallback` (0: none).
  void validate(const std::string& what, int fallback) {
    if (const std::string error = c_.scenario.validate(); !error.empty()) {
      const int line = line_of_validation_error(index_, error);
      fail_at(line > 0 ? line : fallback, what + error);
    }
  }

  void require(const char* key, const std::string& where) {
    if (index_.key_line.count(key) == 0) {
      fail_at(0, where + ": missing \"" + key + "\"; expected a line \"" + key +
                     " <value>\" (docs/CASE_FORMAT.md)");
    }
  }

  CaseFile c_;
  LineIndex index_;
  Budget own_budget_;
  Budget* budget_ = &own_budget_;   // the file's, shared with its prelude blocks
  int block_begin_ = 0;             // the line of "prelude begin", for a block's parser
  std::unique_ptr<Parser> block_;   // the prelude block being read, if any
  std::vector<int> prelude_lines_;  // [prelude case] the line of its "prelude begin"
  int last_line_ = 0;
};

}  // namespace

Result<CaseFile> parse_case(std::string_view text) {
  try {
    return Parser().parse(text);
  } catch (const ParseError& e) {
    return Result<CaseFile>::failure(
        e.line > 0 ? "line " + std::to_string(e.line) + ": " + e.message : e.message);
  }
}

Result<CaseFile> read_case_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<CaseFile>::failure(path + ": cannot open the file");
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, size_t(in.gcount()));
    if (text.size() > kMaxCaseBytes) {
      return Result<CaseFile>::failure(path + ": larger than " + std::to_string(kMaxCaseBytes) +
                                       " bytes; expected a case file");
    }
  }
  Result<CaseFile> parsed = parse_case(text);
  if (!parsed) return Result<CaseFile>::failure(path + ": " + parsed.error());
  return parsed;
}

}  // namespace kvcheck
