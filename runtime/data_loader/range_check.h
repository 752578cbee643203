// Internal: the overflow-safe bounds check every loader applies before touching a byte.

#ifndef EDGESHARE_RUNTIME_DATA_LOADER_RANGE_CHECK_H_
#define EDGESHARE_RUNTIME_DATA_LOADER_RANGE_CHECK_H_

#include <cstddef>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

// Ok when [offset, offset + size) lies inside [0, total); written so that huge values from a
// hostile file cannot wrap around.
inline Status check_range(size_t offset, size_t size, size_t total, const char* name) {
  ES_CHECK_OR_RETURN_ERROR(offset <= total && size <= total - offset, Error::OutOfRange,
                           "range [%zu, +%zu) is past the end of %s (%zu bytes)", offset, size,
                           name, total);
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_DATA_LOADER_RANGE_CHECK_H_
