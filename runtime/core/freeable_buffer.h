// FreeableBuffer: read-only bytes that someone else may own, with the callback that gives them
// back.
//
// Loaders hand out FreeableBuffers: a heap copy (freed with its memory), a view into an mmapped
// region (freed by unmapping it), or a borrowed view (freeing does nothing). Whoever holds the
// buffer decides when the bytes may go: call free() as soon as they are no longer needed (the
// XNNPACK delegate frees weights right after packing them), or let the destructor do it.
//
//   Result<FreeableBuffer> bytes = loader.load(offset, size);
//   use(bytes->data(), bytes->size());
//   bytes->free();   // data() is null from here on
//
// Move-only. Not thread-safe: one owner at a time.

#ifndef EDGESHARE_RUNTIME_CORE_FREEABLE_BUFFER_H_
#define EDGESHARE_RUNTIME_CORE_FREEABLE_BUFFER_H_

#include <cstddef>
#include <utility>

namespace edgeshare {
namespace runtime {

class FreeableBuffer {
 public:
  // Called once with the context, data and size given at construction.
  using FreeFn = void (*)(void* context, const void* data, size_t size);

  FreeableBuffer() = default;
  // A buffer freed with `free_fn(context, data, size)`; a null free_fn borrows.
  FreeableBuffer(const void* data, size_t size, FreeFn free_fn, void* context = nullptr)
      : data_(data), size_(size), free_fn_(free_fn), context_(context) {}

  FreeableBuffer(FreeableBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        free_fn_(std::exchange(other.free_fn_, nullptr)),
        context_(std::exchange(other.context_, nullptr)),
        file_pages_(std::exchange(other.file_pages_, false)) {}
  FreeableBuffer& operator=(FreeableBuffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      free_fn_ = std::exchange(other.free_fn_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
      file_pages_ = std::exchange(other.file_pages_, false);
    }
    return *this;
  }
  FreeableBuffer(const FreeableBuffer&) = delete;
  FreeableBuffer& operator=(const FreeableBuffer&) = delete;
  ~FreeableBuffer() { free(); }

  // Gives the bytes back; afterwards data() is null and size() is 0. Safe to call twice.
  void free() {
    if (free_fn_ != nullptr && data_ != nullptr) free_fn_(context_, data_, size_);
    data_ = nullptr;
    size_ = 0;
    free_fn_ = nullptr;
    context_ = nullptr;
    file_pages_ = false;
  }

  // Marks the bytes as a read-only mapping of a file (what MmapDataLoader hands out): the system
  // can read their pages again, so release_resident_pages() may drop them.
  void set_file_pages() { file_pages_ = true; }

  // For a read-only file mapping, drops the whole pages inside the bytes from the process's
  // resident memory (the bytes stay valid: a later read faults them in from the file again); e.g.
  // after hashing a table of which runs read a few rows. Does nothing for other buffers.
  void release_resident_pages() const;

  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  FreeFn free_fn_ = nullptr;
  void* context_ = nullptr;
  bool file_pages_ = false;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_FREEABLE_BUFFER_H_
