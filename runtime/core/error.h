// Error: the status codes every edgeshare runtime call returns, grouped by range.
//
// Codes say what kind of thing went wrong; the Status that carries one (status.h) also carries a
// one-sentence message naming the file, method, key or field. to_string() gives the code's name.
//
//   Status s = program.load_method("forward", ...).status();
//   if (s.code() == Error::NotFound) { ... }

#ifndef EDGESHARE_RUNTIME_CORE_ERROR_H_
#define EDGESHARE_RUNTIME_CORE_ERROR_H_

#include <cstdint>

namespace edgeshare {
namespace runtime {

enum class Error : uint32_t {
  // System.
  Ok = 0x00,
  Internal = 0x01,
  InvalidState = 0x02,

  // Logic: the caller or the file is wrong.
  InvalidArgument = 0x10,
  InvalidProgram = 0x11,
  InvalidData = 0x12,
  NotFound = 0x13,
  NotSupported = 0x14,
  AlreadyExists = 0x15,
  OutOfRange = 0x16,

  // Resources.
  MemoryAllocationFailed = 0x20,
  AccessFailed = 0x21,
  // A bounded resource is full for now (a request queue); the same call may succeed later.
  ResourceExhausted = 0x22,

  // Delegates.
  DelegateInvalidCompatibility = 0x30,
  DelegateInitFailed = 0x31,
  DelegateExecutionFailed = 0x32,
};

// The code's name, e.g. "InvalidProgram"; never null.
const char* to_string(Error error);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_ERROR_H_
