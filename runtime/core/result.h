// Result<T>: a T, or the Status that says why there is none. Returned by every runtime call that
// produces something and can fail, in the spirit of absl::StatusOr.
//
//   Result<Program> program = Program::load(&loader);
//   if (!program.ok()) { report(program.status().message()); return; }
//   program->num_methods();
//
// Inside functions that return Status or Result, the macros below propagate failures:
//   ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
//   ES_RETURN_IF_ERROR(method.execute());
//   ES_CHECK_OR_RETURN_ERROR(size <= limit, Error::OutOfRange, "size %zu past %zu", size, limit);
//
// Accessing the value of a failed Result is a programming error (it aborts in debug builds).
// Thread-safety: a value type; as thread-safe as T.

#ifndef EDGESHARE_RUNTIME_CORE_RESULT_H_
#define EDGESHARE_RUNTIME_CORE_RESULT_H_

#include <optional>
#include <type_traits>
#include <utility>

#include "edgeshare/runtime/core/status.h"

namespace edgeshare {
namespace runtime {

template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_reference<T>::value, "Result<T&> is not supported; use Result<T*>");

 public:
  Result(const T& value) : value_(value) {}             // NOLINT: implicit by design.
  Result(T&& value) : value_(std::move(value)) {}       // NOLINT
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    // A Result built from an ok Status would hold nothing; make that visible instead of UB.
    if (status_.ok()) status_ = Status::Format(Error::Internal, "Result built from an ok Status");
  }
  Result(Error code) : Result(Status(code)) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  Error error() const { return status_.code(); }

  T& get() & { return *value_; }
  const T& get() const& { return *value_; }
  T&& get() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace internal {
inline Status AsStatus(Status status) { return status; }
template <typename T>
Status AsStatus(Result<T> result) {
  return result.status();
}
}  // namespace internal

}  // namespace runtime
}  // namespace edgeshare

#define ES_INTERNAL_CONCAT2(a, b) a##b
#define ES_INTERNAL_CONCAT(a, b) ES_INTERNAL_CONCAT2(a, b)

// Returns the Status of `expr` (a Status or Result) from the enclosing function if it failed.
#define ES_RETURN_IF_ERROR(expr)                                                     \
  do {                                                                               \
    auto es_internal_value = (expr);                                                 \
    if (!es_internal_value.ok()) {                                                   \
      return ::edgeshare::runtime::internal::AsStatus(std::move(es_internal_value)); \
    }                                                                                \
  } while (0)

// Evaluates `expr` (a Result<T>); on failure returns its Status, else moves the value into `lhs`.
#define ES_ASSIGN_OR_RETURN(lhs, expr) \
  ES_INTERNAL_ASSIGN_OR_RETURN(ES_INTERNAL_CONCAT(es_internal_result_, __LINE__), lhs, expr)
#define ES_INTERNAL_ASSIGN_OR_RETURN(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).get()

// Returns Status::Format(code, format, ...) when `cond` is false.
#define ES_CHECK_OR_RETURN_ERROR(cond, code, ...)                                \
  do {                                                                           \
    if (!(cond)) return ::edgeshare::runtime::Status::Format(code, __VA_ARGS__); \
  } while (0)

#endif  // EDGESHARE_RUNTIME_CORE_RESULT_H_
