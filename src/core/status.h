// Errors are values at library boundaries (architecture.md): a Status or an Expected<T> carries either a
// result or one message that names the thing and the rule that was violated. The CLI prints the message
// and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gridq {

struct Error {
  std::string message;
};

// Builds an Error with fmt-style formatting: return err("{}: shape {} is not [rows, in]", name, dims);
template <typename... Args>
Error err(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)) {}  // NOLINT: implicit so `return err(...)` works
  static Status ok_status() { return Status(); }
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string& message() const {
    static const std::string empty;
    return error_ ? error_->message : empty;
  }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Error e) : v_(std::move(e)) {}      // NOLINT
  Expected(Status s) : v_(s.error()) {}        // only for a failed Status

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<Error>(v_); }
  const std::string& message() const { return error().message; }
  Status status() const { return ok() ? Status() : Status(error()); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace gridq

#define GRIDQ_CONCAT_INNER(a, b) a##b
#define GRIDQ_CONCAT(a, b) GRIDQ_CONCAT_INNER(a, b)

// Returns the error of a failed Status/Expected expression from the enclosing function.
#define GRIDQ_RETURN_IF_ERROR(expr)                      \
  do {                                                   \
    auto&& _gridq_st = (expr);                           \
    if (!_gridq_st.ok()) return ::gridq::Error{_gridq_st.error()}; \
  } while (0)

// GRIDQ_ASSIGN_OR_RETURN(auto x, expr): unwraps an Expected into x or returns its error.
#define GRIDQ_ASSIGN_OR_RETURN(lhs, expr)                         \
  auto GRIDQ_CONCAT(_gridq_ex_, __LINE__) = (expr);              \
  if (!GRIDQ_CONCAT(_gridq_ex_, __LINE__).ok())                  \
    return ::gridq::Error{GRIDQ_CONCAT(_gridq_ex_, __LINE__).error()}; \
  lhs = std::move(GRIDQ_CONCAT(_gridq_ex_, __LINE__)).value()
