#include "edgeshare/runtime/core/freeable_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace edgeshare {
namespace runtime {

void FreeableBuffer::release_resident_pages() const {
  if (!file_pages_ || data_ == nullptr) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data_) + size_) & ~(page - 1);
  // Clean pages of a read-only private file mapping: dropping them loses nothing.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace runtime
}  // namespace edgeshare
