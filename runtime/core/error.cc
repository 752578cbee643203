#include "edgeshare/runtime/core/error.h"

namespace edgeshare {
namespace runtime {

const char* to_string(Error error) {
  switch (error) {
    case Error::Ok:
      return "Ok";
    case Error::Internal:
      return "Internal";
    case Error::InvalidState:
      return "InvalidState";
    case Error::InvalidArgument:
      return "InvalidArgument";
    case Error::InvalidProgram:
      return "InvalidProgram";
    case Error::InvalidData:
      return "InvalidData";
    case Error::NotFound:
      return "NotFound";
    case Error::NotSupported:
      return "NotSupported";
    case Error::AlreadyExists:
      return "AlreadyExists";
    case Error::OutOfRange:
      return "OutOfRange";
    case Error::MemoryAllocationFailed:
      return "MemoryAllocationFailed";
    case Error::ResourceExhausted:
      return "ResourceExhausted";
    case Error::AccessFailed:
      return "AccessFailed";
    case Error::DelegateInvalidCompatibility:
      return "DelegateInvalidCompatibility";
    case Error::DelegateInitFailed:
      return "DelegateInitFailed";
    case Error::DelegateExecutionFailed:
      return "DelegateExecutionFailed";
  }
  return "Unknown";
}

}  // namespace runtime
}  // namespace edgeshare
