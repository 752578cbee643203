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
        context_(std::exchange(other.context_, nullptr)) {}
  FreeableBuffer& operator=(FreeableBuffer&& other) noexcept {
    if (this != &other) {
      free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      free_fn_ = std::exchange(other.free_fn_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
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
  }

  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  FreeFn free_fn_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_FREEABLE_BUFFER_H_
