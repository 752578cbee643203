#include "edgeshare/runtime/data_loader/mmap_data_loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "edgeshare/runtime/data_loader/range_check.h"

namespace edgeshare {
namespace runtime {
namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// The mapping starts at the page below `data`; recover it rather than storing it per buffer.
void Unmap(void* /*context*/, const void* data, size_t size) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t base = address & ~(static_cast<uintptr_t>(page_size()) - 1);
  ::munmap(reinterpret_cast<void*>(base), size + (address - base));
}

}  // namespace

Result<MmapDataLoader> MmapDataLoader::from(const char* path) {
  ES_CHECK_OR_RETURN_ERROR(path != nullptr, Error::InvalidArgument, "MmapDataLoader: null path");
  // O_NONBLOCK: a FIFO or a device is refused below instead of blocking the open; reads of a
  // regular file ignore the flag.
  const int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ES_CHECK_OR_RETURN_ERROR(fd >= 0, Error::AccessFailed, "cannot open %s: %s", path,
                           std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Format(Error::AccessFailed, "cannot map %s: not a regular file", path);
  }
  return MmapDataLoader(fd, static_cast<size_t>(st.st_size), std::string(path),
                        static_cast<unsigned long>(st.st_dev),
                        static_cast<unsigned long>(st.st_ino));
}

MmapDataLoader::MmapDataLoader(MmapDataLoader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)),
      device_(other.device_),
      inode_(other.inode_) {}

MmapDataLoader::~MmapDataLoader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<FreeableBuffer> MmapDataLoader::load(size_t offset, size_t size) const {
  ES_RETURN_IF_ERROR(check_range(offset, size, size_, name()));
  if (size == 0) return FreeableBuffer();
  const size_t page_offset = offset & ~(page_size() - 1);
  const size_t lead = offset - page_offset;
  void* base =
      ::mmap(nullptr, size + lead, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(page_offset));
  ES_CHECK_OR_RETURN_ERROR(base != MAP_FAILED, Error::AccessFailed,
                           "cannot map %zu bytes at %zu of %s: %s", size, offset, name(),
                           std::strerror(errno));
  FreeableBuffer bytes(static_cast<const uint8_t*>(base) + lead, size, Unmap);
  bytes.set_file_pages();
  return bytes;
}

}  // namespace runtime
}  // namespace edgeshare
