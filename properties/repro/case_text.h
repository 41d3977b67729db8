// The words and numbers of the case format (docs/CASE_FORMAT.md), as
// parse_case (case_file.cpp) reads them: splitting a line, quoting input in
// a message, integers and numbers in range with a message naming the field
// and the value, and tracing a validation message back to its line. An
// internal header of properties/repro/.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvcheck::case_text {

// The first whitespace-separated word of `rest`, which loses it; blanks
// and control characters at the ends never belong to a value.
std::string_view next_word(std::string_view& rest);
std::string_view trim(std::string_view text);
// Input text in a message: printable ASCII kept, the rest escaped, cut short.
std::string quoted(std::string_view text);

struct ParseError {
  int line;  // 0: not tied to one line
  std::string message;
};
[[noreturn]] void fail_at(int line, std::string message);

// Config fields in print order; each is required exactly once.
inline constexpr const char* kConfigKeys[] = {"family",     "n_layers",   "d_model",  "n_heads",
                                              "n_kv_heads", "head_dim",   "d_ff",     "vocab",
                                              "max_pos",    "rope_theta", "norm_eps", "qkv_bias"};
inline constexpr const char* kEngineKeys[] = {"weight_seed", "capacity", "max_rows", "kv_dtype"};
bool is_config_key(std::string_view key);
bool is_engine_key(std::string_view key);
std::string property_choices();  // "oracle, chunking, ..."

// Each throws ParseError naming `field` and quoting `text` when it is not
// a number of its kind in range.
int64_t parse_integer(int line, std::string_view field, std::string_view text, int64_t lo,
                      int64_t hi);
int parse_int(int line, std::string_view field, std::string_view text, int lo = 0,
              int hi = std::numeric_limits<int>::max());
uint64_t parse_u64(int line, std::string_view field, std::string_view text);
double parse_double(int line, std::string_view field, std::string_view text);
// "s<index>" naming a sequence; the index is checked against the schedule by
// Scenario::validate.
int parse_sequence_ref(int line, std::string_view what, std::string_view text);

// Traces a Scenario::validate message ("call 3: ...", "sequence 1, token 2:
// ...", "capacity: ...", "config: n_heads: ...") back to the line it names.
struct LineIndex {
  std::map<std::string, int, std::less<>> key_line;
  std::vector<int> sequence_line;  // [sequence]
  std::vector<int> call_line;      // [call]
};
int line_of_validation_error(const LineIndex& index, std::string_view error);

}  // namespace kvcheck::case_text
