// The words and numbers of the case format (case_text.h).
#include "properties/repro/case_text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "properties/property.h"
#include "properties/repro/case_file.h"

namespace kvcheck::case_text {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

// Blanks and control characters at the ends carry nothing a reader could
// see, so they never belong to a value (and a value never ends with one).
bool is_blank(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u <= 0x20 || u == 0x7f;
}

}  // namespace

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

// Splits off the first whitespace-separated word.
std::string_view next_word(std::string_view& rest) {
  rest = trim(rest);
  size_t end = 0;
  while (end < rest.size() && !is_space(rest[end])) ++end;
  const std::string_view word = rest.substr(0, end);
  rest = trim(rest.substr(end));
  return word;
}

// Quotes input text in a message: printable ASCII kept, the rest escaped, and
// cut short so that a hostile line cannot make the message huge.
std::string quoted(std::string_view text) {
  constexpr size_t kMaxQuoted = 60;
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMaxQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  if (text.size() > kMaxQuoted) out += "...";
  return out + "\"";
}

[[noreturn]] void fail_at(int line, std::string message) {
  throw ParseError{line, std::move(message)};
}

bool is_config_key(std::string_view key) {
  for (const char* k : kConfigKeys) {
    if (key == k) return true;
  }
  return false;
}

bool is_engine_key(std::string_view key) {
  for (const char* k : kEngineKeys) {
    if (key == k) return true;
  }
  return false;
}

std::string property_choices() {
  std::string text;
  for (int i = 0; i < kPropertyCount; ++i) {
    if (i > 0) text += ", ";
    text += std::string(property_name(static_cast<Property>(i)));
  }
  return text;
}

int64_t parse_integer(int line, std::string_view field, std::string_view text, int64_t lo,
                      int64_t hi) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  if (text.empty() || result.ec != std::errc() || result.ptr != end || value < lo || value > hi) {
    fail_at(line, std::string(field) + ": expected an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got " + quoted(text));
  }
  return value;
}

int parse_int(int line, std::string_view field, std::string_view text, int lo, int hi) {
  return static_cast<int>(parse_integer(line, field, text, lo, hi));
}

uint64_t parse_u64(int line, std::string_view field, std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  if (text.empty() || result.ec != std::errc() || result.ptr != end) {
    fail_at(line,
            std::string(field) + ": expected an unsigned 64-bit integer, got " + quoted(text));
  }
  return value;
}

double parse_double(int line, std::string_view field, std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  if (text.empty() || result.ec != std::errc() || result.ptr != end || !std::isfinite(value)) {
    fail_at(line,
            std::string(field) + ": expected a finite number (e.g. 1e-05), got " + quoted(text));
  }
  return value;
}

// "s<index>" naming a sequence; the index is checked against the schedule by
// Scenario::validate.
int parse_sequence_ref(int line, std::string_view what, std::string_view text) {
  if (text.size() < 2 || text[0] != 's') {
    fail_at(line,
            std::string(what) + ": expected a sequence as s<index> (e.g. s0), got " + quoted(text));
  }
  return parse_int(line, what, text.substr(1), 0, kMaxCaseSequences - 1);
}

namespace {

int leading_number(std::string_view text) {
  int value = -1;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace

int line_of_validation_error(const LineIndex& index, std::string_view error) {
  const auto key_line = [&](std::string_view key) {
    const auto it = index.key_line.find(key);
    return it == index.key_line.end() ? 0 : it->second;
  };
  if (error.starts_with("call ")) {
    const int call = leading_number(error.substr(5));
    if (call >= 0 && call < static_cast<int>(index.call_line.size())) {
      return index.call_line[size_t(call)];
    }
    return 0;
  }
  if (error.starts_with("sequence ")) {
    const int sequence = leading_number(error.substr(9));
    if (sequence >= 0 && sequence < static_cast<int>(index.sequence_line.size())) {
      return index.sequence_line[size_t(sequence)];
    }
    return 0;
  }
  if (error.starts_with("config: ")) error.remove_prefix(8);
  size_t field_end = 0;
  while (field_end < error.size() &&
         (std::isalnum(static_cast<unsigned char>(error[field_end])) || error[field_end] == '_')) {
    ++field_end;
  }
  return key_line(error.substr(0, field_end));
}

}  // namespace kvcheck::case_text
