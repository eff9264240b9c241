// Errors are values inside gpuslice: a Result holds either a value or a human-readable message.
// Nothing here throws, so it is safe in the injected library (built with -fno-exceptions).
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace gpuslice {

struct Error {
  std::string message;
};

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}              // NOLINT(google-explicit-constructor)
  Result(Error error) : error_(std::move(error.message)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }
  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

}  // namespace gpuslice
