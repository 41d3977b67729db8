// Environment variables a test sets, put back as they were when it ends
// (set to their old values, or unset where they were unset).
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvcheck::test {

class SavedEnvironment {
 public:
  SavedEnvironment(std::initializer_list<const char*> names) : names_(names.begin(), names.end()) {
    for (const std::string& name : names_)
      if (const char* value = std::getenv(name.c_str())) saved_[name] = value;
  }
  ~SavedEnvironment() {
    for (const std::string& name : names_) {
      const auto found = saved_.find(name);
      if (found != saved_.end()) {
        ::setenv(name.c_str(), found->second.c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  SavedEnvironment(const SavedEnvironment&) = delete;
  SavedEnvironment& operator=(const SavedEnvironment&) = delete;

  void clear() {
    for (const std::string& name : names_) ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, std::string> saved_;  // [name] value before the test
};

}  // namespace kvcheck::test
