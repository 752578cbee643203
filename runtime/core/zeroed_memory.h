// ZeroedMemory: zero-filled, writable memory whose pages cost resident memory only once written.
//
// Planned memory, a delegate graph's intermediates and the process's working block are sized for
// a method's token bound, while a run writes what its length needs (and a graph's own arena is
// written only when another thread holds the shared block). calloc does not keep that promise: once
// the allocator has freed a large block, it serves the next large ones from its heap and zeroes
// reused memory by writing it, so every byte counts at once. These pages are mapped anonymously
// instead: zero on first read, resident on first write, returned to the system when released.
//
//   ES_ASSIGN_OR_RETURN(ZeroedMemory memory, ZeroedMemory::allocate(bytes));
//   float* base = static_cast<float*>(memory.data());   // page-aligned, bytes of zeros
//
// Errors: allocate() returns MemoryAllocationFailed when the system has no room for the mapping.
// Ownership: move-only; the destructor unmaps. Thread-safety: none needed beyond the owner's.

#ifndef EDGESHARE_RUNTIME_CORE_ZEROED_MEMORY_H_
#define EDGESHARE_RUNTIME_CORE_ZEROED_MEMORY_H_

#include <cstddef>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

class ZeroedMemory {
 public:
  // `bytes` of zeros (none for 0: data() is null).
  static Result<ZeroedMemory> allocate(size_t bytes);

  ZeroedMemory() = default;
  ~ZeroedMemory();
  ZeroedMemory(ZeroedMemory&& other) noexcept;
  ZeroedMemory& operator=(ZeroedMemory&& other) noexcept;
  ZeroedMemory(const ZeroedMemory&) = delete;
  ZeroedMemory& operator=(const ZeroedMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ZeroedMemory(void* data, size_t size, size_t mapped) : data_(data), size_(size), mapped_(mapped) {}
  void release();

  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // size_ rounded up to whole pages
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_ZEROED_MEMORY_H_
