#include "edgeshare/runtime/kernels/kernel_registry.h"

#include <cstring>
#include <mutex>

namespace edgeshare {
namespace runtime {
namespace {

constexpr size_t kMaxKernels = 256;
constexpr size_t kMaxNameLength = 96;

struct Entry {
  char name[kMaxNameLength];
  KernelFn fn;
};

// Fixed storage: kernels register from static initializers.
struct Registry {
  std::mutex mutex;
  Entry entries[kMaxKernels];
  size_t count = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // Never destroyed.
  return *r;
}

}  // namespace

Status register_kernel(const char* name, KernelFn fn) {
  ES_CHECK_OR_RETURN_ERROR(name != nullptr && fn != nullptr, Error::InvalidArgument,
                           "register_kernel: null name or function");
  const size_t length = std::strlen(name);
  ES_CHECK_OR_RETURN_ERROR(length > 0 && length < kMaxNameLength, Error::InvalidArgument,
                           "register_kernel: name '%s' must be 1..%zu characters", name,
                           kMaxNameLength - 1);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.count; ++i) {
    ES_CHECK_OR_RETURN_ERROR(std::strcmp(r.entries[i].name, name) != 0, Error::AlreadyExists,
                             "register_kernel: '%s' is already registered", name);
  }
  ES_CHECK_OR_RETURN_ERROR(r.count < kMaxKernels, Error::MemoryAllocationFailed,
                           "register_kernel: no room for '%s'", name);
  std::memcpy(r.entries[r.count].name, name, length + 1);
  r.entries[r.count].fn = fn;
  ++r.count;
  return Status();
}

KernelFn get_kernel(const char* name) {
  if (name == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.count; ++i) {
    if (std::strcmp(r.entries[i].name, name) == 0) return r.entries[i].fn;
  }
  return nullptr;
}

}  // namespace runtime
}  // namespace edgeshare
