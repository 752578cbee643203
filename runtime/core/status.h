// Status: an Error code plus the one-sentence message that says what failed, for the caller.
//
// Ok statuses carry nothing and cost nothing; a failed one owns a short heap-allocated message
// (allocation happens only when something has already gone wrong, never on a success path).
//
//   Status s = Status::Format(Error::NotFound, "key '%s' missing in %s", key, file);
//   if (!s.ok()) return s;                  // or ES_RETURN_IF_ERROR(expr)
//   const char* why = s.message();          // never null; "" when ok
//
// Thread-safety: a Status is a value; distinct objects may be used on distinct threads.

#ifndef EDGESHARE_RUNTIME_CORE_STATUS_H_
#define EDGESHARE_RUNTIME_CORE_STATUS_H_

#include <cstddef>
#include <utility>

#include "edgeshare/runtime/core/error.h"

namespace edgeshare {
namespace runtime {

class [[nodiscard]] Status {
 public:
  // Ok.
  Status() = default;
  // A failure with the code's name as its message. Error::Ok makes an ok Status.
  Status(Error code);  // NOLINT: implicit so that `return Error::NotFound;` reads naturally.
  // A failure with a printf-style message (truncated to 511 bytes).
  static Status Format(Error code, const char* format, ...) __attribute__((format(printf, 2, 3)));

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept
      : code_(other.code_), message_(std::exchange(other.message_, nullptr)) {
    other.code_ = Error::Ok;
  }
  Status& operator=(Status&& other) noexcept;
  ~Status();

  bool ok() const { return code_ == Error::Ok; }
  Error code() const { return code_; }
  // The message; "" when ok. Valid while this Status lives.
  const char* message() const;

  // A copy whose message is prefixed with `context: `, e.g. the file being loaded.
  Status WithContext(const char* format, ...) const __attribute__((format(printf, 2, 3)));

 private:
  Status(Error code, char* message) : code_(code), message_(message) {}
  Error code_ = Error::Ok;
  char* message_ = nullptr;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_STATUS_H_
