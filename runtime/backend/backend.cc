#include "edgeshare/runtime/backend/backend.h"

#include <cstring>
#include <mutex>

namespace edgeshare {
namespace runtime {
namespace {

constexpr size_t kMaxBackends = 16;
constexpr size_t kMaxNameLength = 64;

struct Entry {
  char name[kMaxNameLength];
  const BackendInterface* backend;
};

// A fixed table: registration happens from static initializers, before main and any allocator.
struct Registry {
  std::mutex mutex;
  Entry entries[kMaxBackends];
  size_t count = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // Never destroyed: backends may be looked up at exit.
  return *r;
}

}  // namespace

Status register_backend(const char* name, const BackendInterface* backend) {
  ES_CHECK_OR_RETURN_ERROR(name != nullptr && backend != nullptr, Error::InvalidArgument,
                           "register_backend: null name or backend");
  const size_t length = std::strlen(name);
  ES_CHECK_OR_RETURN_ERROR(length > 0 && length < kMaxNameLength, Error::InvalidArgument,
                           "register_backend: name '%s' must be 1..%zu characters", name,
                           kMaxNameLength - 1);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.count; ++i) {
    ES_CHECK_OR_RETURN_ERROR(std::strcmp(r.entries[i].name, name) != 0, Error::AlreadyExists,
                             "register_backend: a backend named '%s' is already registered",
                             name);
  }
  ES_CHECK_OR_RETURN_ERROR(r.count < kMaxBackends, Error::MemoryAllocationFailed,
                           "register_backend: no room for '%s' (at most %zu backends)", name,
                           kMaxBackends);
  std::memcpy(r.entries[r.count].name, name, length + 1);
  r.entries[r.count].backend = backend;
  ++r.count;
  return Status();
}

const BackendInterface* get_backend(const char* name) {
  if (name == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.count; ++i) {
    if (std::strcmp(r.entries[i].name, name) == 0) return r.entries[i].backend;
  }
  return nullptr;
}

}  // namespace runtime
}  // namespace edgeshare
