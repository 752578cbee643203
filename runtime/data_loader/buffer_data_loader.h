// BufferDataLoader: views of caller-owned memory, e.g. a .pte embedded in a binary or read by the
// embedder itself.
//
//   BufferDataLoader loader(bytes, size, "model.pte");
//   ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
//
// The memory must outlive the loader and every buffer it returns; nothing is copied or freed.
// Errors: OutOfRange past the end. Thread-safe.

#ifndef EDGESHARE_RUNTIME_DATA_LOADER_BUFFER_DATA_LOADER_H_
#define EDGESHARE_RUNTIME_DATA_LOADER_BUFFER_DATA_LOADER_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/data_loader/range_check.h"

namespace edgeshare {
namespace runtime {

class BufferDataLoader final : public DataLoader {
 public:
  BufferDataLoader(const void* data, size_t size, const char* name = "<buffer>")
      : data_(static_cast<const uint8_t*>(data)), size_(size), name_(name) {}

  Result<FreeableBuffer> load(size_t offset, size_t size) const override {
    ES_RETURN_IF_ERROR(check_range(offset, size, size_, name_));
    return FreeableBuffer(data_ + offset, size, nullptr);
  }
  size_t size() const override { return size_; }
  const char* name() const override { return name_; }

 private:
  const uint8_t* data_;
  size_t size_;
  const char* name_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_DATA_LOADER_BUFFER_DATA_LOADER_H_
