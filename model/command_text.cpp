// Shell quoting and backend strings that name code (command_text.h).
#include "model/command_text.h"

namespace kvcheck {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

bool backend_runs_named_code(std::string_view backend) {
  return backend.starts_with("plugin:") || backend.starts_with("exec:");
}

}  // namespace kvcheck
