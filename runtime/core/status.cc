#include "edgeshare/runtime/core/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

namespace edgeshare {
namespace runtime {
namespace {

constexpr size_t kMaxMessage = 512;

char* CopyMessage(const char* text) {
  if (text == nullptr) return nullptr;
  const size_t n = std::strlen(text);
  // On allocation failure the Status keeps its code and falls back to the code's name.
  char* copy = new (std::nothrow) char[n + 1];
  if (copy != nullptr) std::memcpy(copy, text, n + 1);
  return copy;
}

}  // namespace

Status::Status(Error code) : code_(code) {}

Status Status::Format(Error code, const char* format, ...) {
  if (code == Error::Ok) return Status();
  char buffer[kMaxMessage];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return Status(code, CopyMessage(buffer));
}

Status::Status(const Status& other) : code_(other.code_), message_(CopyMessage(other.message_)) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    delete[] message_;
    code_ = other.code_;
    message_ = CopyMessage(other.message_);
  }
  return *this;
}

Status& Status::operator=(Status&& other) noexcept {
  if (this != &other) {
    delete[] message_;
    code_ = std::exchange(other.code_, Error::Ok);
    message_ = std::exchange(other.message_, nullptr);
  }
  return *this;
}

Status::~Status() { delete[] message_; }

const char* Status::message() const {
  if (message_ != nullptr) return message_;
  return ok() ? "" : to_string(code_);
}

Status Status::WithContext(const char* format, ...) const {
  if (ok()) return Status();
  char buffer[kMaxMessage];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (n >= 0 && static_cast<size_t>(n) < sizeof(buffer)) {
    std::snprintf(buffer + n, sizeof(buffer) - n, ": %s", message());
  }
  return Status(code_, CopyMessage(buffer));
}

}  // namespace runtime
}  // namespace edgeshare
