// Errors at a boundary (config, safetensors, case file, CLI) are values, not
// asserts: a message that names the field and the value that was wrong.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace kvcheck {

// Thrown where a caller cannot sensibly continue; carries the same message a
// Result would. The CLI maps it to exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  static Result failure(std::string message) { return Result(Failure{std::move(message)}); }

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return checked(); }
  T& value() & { return checked(); }
  T&& value() && { return std::move(checked()); }
  const std::string& error() const { return std::get<Failure>(state_).message; }

 private:
  struct Failure {
    std::string message;
  };
  explicit Result(Failure f) : state_(std::move(f)) {}
  T& checked() {
    if (!ok()) throw InputError(error());
    return std::get<T>(state_);
  }
  const T& checked() const {
    if (!ok()) throw InputError(error());
    return std::get<T>(state_);
  }
  std::variant<T, Failure> state_;
};

}  // namespace kvcheck
