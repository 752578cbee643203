// FileDataLoader: reads a file with pread into heap copies. For .pte files, whose flatbuffer and
// small segments are read once at load.
//
//   ES_ASSIGN_OR_RETURN(FileDataLoader loader, FileDataLoader::from("lora_a.pte"));
//   ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
//
// Errors: from() gives AccessFailed for a missing or unreadable file (naming it); load() gives
// OutOfRange past the end. Thread-safe (pread has no shared offset). Move-only; owns its fd.

#ifndef EDGESHARE_RUNTIME_DATA_LOADER_FILE_DATA_LOADER_H_
#define EDGESHARE_RUNTIME_DATA_LOADER_FILE_DATA_LOADER_H_

#include <cstddef>
#include <string>

#include "edgeshare/runtime/core/data_loader.h"

namespace edgeshare {
namespace runtime {

class FileDataLoader final : public DataLoader {
 public:
  static Result<FileDataLoader> from(const char* path);

  FileDataLoader(FileDataLoader&& other) noexcept;
  FileDataLoader& operator=(FileDataLoader&&) = delete;
  FileDataLoader(const FileDataLoader&) = delete;
  ~FileDataLoader() override;

  Result<FreeableBuffer> load(size_t offset, size_t size) const override;
  Status load_into(size_t offset, size_t size, void* dst) const override;
  size_t size() const override { return size_; }
  const char* name() const override { return path_.c_str(); }

 private:
  FileDataLoader(int fd, size_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_DATA_LOADER_FILE_DATA_LOADER_H_
