#include "edgeshare/runtime/core/zeroed_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

namespace edgeshare {
namespace runtime {

Result<ZeroedMemory> ZeroedMemory::allocate(size_t bytes) {
  if (bytes == 0) return ZeroedMemory();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ES_CHECK_OR_RETURN_ERROR(bytes <= SIZE_MAX - page, Error::MemoryAllocationFailed,
                           "cannot map %zu bytes of zeroed memory", bytes);
  const size_t mapped = (bytes + page - 1) / page * page;
  void* data = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ES_CHECK_OR_RETURN_ERROR(data != MAP_FAILED, Error::MemoryAllocationFailed,
                           "cannot map %zu bytes of zeroed memory", bytes);
  return ZeroedMemory(data, bytes, mapped);
}

ZeroedMemory::~ZeroedMemory() { release(); }

ZeroedMemory::ZeroedMemory(ZeroedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

ZeroedMemory& ZeroedMemory::operator=(ZeroedMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void ZeroedMemory::release() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = 0;
}

}  // namespace runtime
}  // namespace edgeshare
