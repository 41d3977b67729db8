// Text about the commands kvcheck prints and the code a backend string
// names: a shell-quoted argument, and whether a backend string loads or
// starts code. Both the case files (properties/repro/) and the registry
// (backends/) ask; here, below both, so that neither includes the other.
#pragma once

#include <string>
#include <string_view>

namespace kvcheck {

// 'text' for a POSIX shell: single quotes, embedded ones escaped.
std::string shell_quote(const std::string& text);

// Whether a backend string loads a shared object (plugin:) or starts a
// command (exec:): code that the string alone names, which a case file must
// never make kvcheck run (backend_for_case, backends/registry.h).
bool backend_runs_named_code(std::string_view backend);

}  // namespace kvcheck
