// MmapDataLoader: zero-copy views of a file through mmap, for .ptd data files.
//
// Each load() maps just the pages that cover the range (read-only, private) and returns a view;
// freeing the view unmaps them, so weights a delegate has packed and freed give their pages back.
//
//   ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from("foundation.ptd"));
//   ES_ASSIGN_OR_RETURN(FreeableBuffer w, loader.load(offset, size));   // no copy
//
// Errors: from() gives AccessFailed for a missing or unreadable file; load() gives OutOfRange past
// the end, AccessFailed if mmap fails. Thread-safe. Move-only; owns its fd. Views stay valid after
// the loader is destroyed (a mapping outlives its fd) until they are freed.

#ifndef EDGESHARE_RUNTIME_DATA_LOADER_MMAP_DATA_LOADER_H_
#define EDGESHARE_RUNTIME_DATA_LOADER_MMAP_DATA_LOADER_H_

#include <cstddef>
#include <string>

#include "edgeshare/runtime/core/data_loader.h"

namespace edgeshare {
namespace runtime {

class MmapDataLoader final : public DataLoader {
 public:
  static Result<MmapDataLoader> from(const char* path);

  MmapDataLoader(MmapDataLoader&& other) noexcept;
  MmapDataLoader& operator=(MmapDataLoader&&) = delete;
  MmapDataLoader(const MmapDataLoader&) = delete;
  ~MmapDataLoader() override;

  Result<FreeableBuffer> load(size_t offset, size_t size) const override;
  size_t size() const override { return size_; }
  const char* name() const override { return path_.c_str(); }

  // The file's device and inode, which identify it across paths (for opening it once per process).
  unsigned long device() const { return device_; }
  unsigned long inode() const { return inode_; }

 private:
  MmapDataLoader(int fd, size_t size, std::string path, unsigned long device, unsigned long inode)
      : fd_(fd), size_(size), path_(std::move(path)), device_(device), inode_(inode) {}
  int fd_ = -1;
  size_t size_ = 0;
  std::string path_;
  unsigned long device_ = 0;
  unsigned long inode_ = 0;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_DATA_LOADER_MMAP_DATA_LOADER_H_
