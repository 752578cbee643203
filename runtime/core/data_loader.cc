#include "edgeshare/runtime/core/data_loader.h"

#include <cstring>

namespace edgeshare {
namespace runtime {

Status DataLoader::load_into(size_t offset, size_t size, void* dst) const {
  ES_CHECK_OR_RETURN_ERROR(dst != nullptr || size == 0, Error::InvalidArgument,
                           "load_into %s: null destination", name());
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, load(offset, size));
  if (size > 0) std::memcpy(dst, bytes.data(), size);
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare
