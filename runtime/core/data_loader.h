// DataLoader: reads byte ranges of one file or buffer, for Program and the .ptd reader.
//
// Implementations (runtime/data_loader): FileDataLoader (pread into a heap copy), MmapDataLoader
// (zero-copy views of an mmapped range, given back by unmapping), BufferDataLoader (views of caller
// memory). A request past the end is an Error::OutOfRange, never a short read.
//
//   ES_ASSIGN_OR_RETURN(FreeableBuffer header, loader.load(0, 48));
//
// Thread-safety: load() and load_into() may be called from several threads at once.
// Ownership: each returned FreeableBuffer is the caller's; it may outlive nothing but the loader.

#ifndef EDGESHARE_RUNTIME_CORE_DATA_LOADER_H_
#define EDGESHARE_RUNTIME_CORE_DATA_LOADER_H_

#include <cstddef>

#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

class DataLoader {
 public:
  virtual ~DataLoader() = default;

  // The bytes [offset, offset + size). Errors: OutOfRange past the end, AccessFailed on an I/O
  // failure, MemoryAllocationFailed.
  virtual Result<FreeableBuffer> load(size_t offset, size_t size) const = 0;

  // Copies [offset, offset + size) into `dst` (at least `size` bytes). Errors as load().
  virtual Status load_into(size_t offset, size_t size, void* dst) const;

  // The total size in bytes.
  virtual size_t size() const = 0;

  // A name for messages: the file path, or "<buffer>". Never null.
  virtual const char* name() const = 0;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_DATA_LOADER_H_
