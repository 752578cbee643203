#include "edgeshare/runtime/data_loader/file_data_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "edgeshare/runtime/data_loader/range_check.h"

namespace edgeshare {
namespace runtime {
namespace {

// Alignment of the heap copies: flatbuffers and tensors read in place need at least 16.
constexpr size_t kAlignment = 64;

void FreeHeap(void* /*context*/, const void* data, size_t /*size*/) {
  std::free(const_cast<void*>(data));
}

}  // namespace

Result<FileDataLoader> FileDataLoader::from(const char* path) {
  ES_CHECK_OR_RETURN_ERROR(path != nullptr, Error::InvalidArgument, "FileDataLoader: null path");
  // O_NONBLOCK: a FIFO or a device is refused below instead of blocking the open; reads of a
  // regular file ignore the flag.
  const int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ES_CHECK_OR_RETURN_ERROR(fd >= 0, Error::AccessFailed, "cannot open %s: %s", path,
                           std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Format(Error::AccessFailed, "cannot read %s: not a regular file", path);
  }
  return FileDataLoader(fd, static_cast<size_t>(st.st_size), std::string(path));
}

FileDataLoader::FileDataLoader(FileDataLoader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

FileDataLoader::~FileDataLoader() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileDataLoader::load_into(size_t offset, size_t size, void* dst) const {
  ES_RETURN_IF_ERROR(check_range(offset, size, size_, name()));
  ES_CHECK_OR_RETURN_ERROR(dst != nullptr || size == 0, Error::InvalidArgument,
                           "load_into %s: null destination", name());
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    ES_CHECK_OR_RETURN_ERROR(n > 0, Error::AccessFailed, "reading %zu bytes at %zu of %s: %s", size,
                             offset, name(), n == 0 ? "file shrank" : std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status();
}

Result<FreeableBuffer> FileDataLoader::load(size_t offset, size_t size) const {
  ES_RETURN_IF_ERROR(check_range(offset, size, size_, name()));
  if (size == 0) return FreeableBuffer();
  void* data = nullptr;
  ES_CHECK_OR_RETURN_ERROR(::posix_memalign(&data, kAlignment, size) == 0,
                           Error::MemoryAllocationFailed, "cannot allocate %zu bytes for %s", size,
                           name());
  FreeableBuffer buffer(data, size, FreeHeap);
  ES_RETURN_IF_ERROR(load_into(offset, size, data));
  return buffer;
}

}  // namespace runtime
}  // namespace edgeshare
