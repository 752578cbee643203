// Internal: a fixed-capacity, thread-safe table from names to values, for the backend and kernel
// registries. Fixed storage because entries register from static initializers, before main.
// T is a pointer or a small struct that converts to bool (false: no value) and whose T() is empty.

#ifndef EDGESHARE_RUNTIME_REGISTRY_NAME_REGISTRY_H_
#define EDGESHARE_RUNTIME_REGISTRY_NAME_REGISTRY_H_

#include <cstddef>
#include <cstring>
#include <mutex>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

template <typename T, size_t kCapacity, size_t kMaxName>
class NameRegistry {
 public:
  // `what` names the registry in messages ("backend", "kernel").
  explicit NameRegistry(const char* what) : what_(what) {}

  // Errors: InvalidArgument (null or bad-length name, null value), AlreadyExists,
  // MemoryAllocationFailed when full.
  Status add(const char* name, T value) {
    ES_CHECK_OR_RETURN_ERROR(name != nullptr && static_cast<bool>(value), Error::InvalidArgument,
                             "register %s: null name or value", what_);
    const size_t length = std::strlen(name);
    ES_CHECK_OR_RETURN_ERROR(length > 0 && length < kMaxName, Error::InvalidArgument,
                             "register %s: name '%s' must be 1..%zu characters", what_, name,
                             kMaxName - 1);
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < count_; ++i) {
      ES_CHECK_OR_RETURN_ERROR(std::strcmp(entries_[i].name, name) != 0, Error::AlreadyExists,
                               "register %s: '%s' is already registered", what_, name);
    }
    ES_CHECK_OR_RETURN_ERROR(count_ < kCapacity, Error::MemoryAllocationFailed,
                             "register %s: no room for '%s' (at most %zu)", what_, name, kCapacity);
    std::memcpy(entries_[count_].name, name, length + 1);
    entries_[count_].value = value;
    ++count_;
    return Status();
  }

  // The value registered under `name`, or T() (null).
  T find(const char* name) {
    if (name == nullptr) return T();
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < count_; ++i) {
      if (std::strcmp(entries_[i].name, name) == 0) return entries_[i].value;
    }
    return T();
  }

  // The number of names, and the i-th in registration order ("" past the end): for tools that
  // list what a binary can run.
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }
  const char* name_at(size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    return i < count_ ? entries_[i].name : "";
  }

 private:
  struct Entry {
    char name[kMaxName];
    T value;
  };
  const char* what_;
  std::mutex mutex_;
  Entry entries_[kCapacity];
  size_t count_ = 0;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_REGISTRY_NAME_REGISTRY_H_
