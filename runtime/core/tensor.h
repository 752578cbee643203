// Tensor: a non-owning view of a dense tensor: element type, sizes, data pointer, and the capacity
// of the memory behind it.
//
// Tensors inside a Method point into its planned memory or at constant bytes it holds; a Tensor
// never owns or frees its data. Sizes live inline (at most kMaxDims), so making or copying a
// Tensor never allocates: kernels and delegates receive them on the execute path.
//
// A program exported with a dynamic dim (e.g. the token count, up to --max-seq-len) plans each
// tensor at its upper bound: the Tensor is made with those sizes, which fix its capacity, and every
// execute resizes it to the real sizes (a kernel computes its output's, set_input takes the
// caller's). resize() keeps the rank and never grows past the capacity, so a shape outside the
// bound is an error, never a write past the buffer.
//
//   Tensor t(ScalarType::Float, {128, 256}, data);   // capacity: 128 * 256 floats
//   ES_RETURN_IF_ERROR(t.resize({7, 256}));            // numel() == 7 * 256 now
//
// Thread-safety: a value type; the data it points to is the owner's business.

#ifndef EDGESHARE_RUNTIME_CORE_TENSOR_H_
#define EDGESHARE_RUNTIME_CORE_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/scalar_type.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {

class Tensor {
 public:
  static constexpr size_t kMaxDims = 8;

  Tensor() = default;
  // Sizes beyond kMaxDims are dropped; callers validate rank first (Method does).
  Tensor(ScalarType type, Span<const int32_t> sizes, void* data) : type_(type), data_(data) {
    dim_ = sizes.size() < kMaxDims ? sizes.size() : kMaxDims;
    for (size_t i = 0; i < dim_; ++i) sizes_[i] = sizes[i];
    capacity_ = nbytes();
  }
  Tensor(ScalarType type, std::initializer_list<int32_t> sizes, void* data)
      : Tensor(type, Span<const int32_t>(sizes.begin(), sizes.size()), data) {}

  ScalarType scalar_type() const { return type_; }
  size_t dim() const { return dim_; }
  int32_t size(size_t i) const { return sizes_[i]; }
  Span<const int32_t> sizes() const { return Span<const int32_t>(sizes_.data(), dim_); }
  size_t numel() const {
    size_t n = 1;
    for (size_t i = 0; i < dim_; ++i) n *= static_cast<size_t>(sizes_[i]);
    return n;
  }
  size_t nbytes() const { return numel() * element_size(type_); }
  // Bytes behind data(): nbytes() of the sizes the Tensor was made with.
  size_t capacity() const { return capacity_; }

  // Sets the sizes, keeping the rank, when they fit in capacity().
  // Errors: InvalidArgument for another rank, a negative size, or more bytes than capacity()
  // (the message gives both); the Tensor is unchanged then.
  Status resize(Span<const int32_t> sizes) {
    if (sizes.size() != dim_) {
      return Status::Format(Error::InvalidArgument, "cannot resize a %zu-dim tensor to %zu dims",
                            dim_, sizes.size());
    }
    size_t bytes = element_size(type_);
    for (size_t i = 0; i < dim_; ++i) {
      if (sizes[i] < 0) {
        return Status::Format(Error::InvalidArgument, "size %d of dim %zu is negative", sizes[i],
                              i);
      }
      bytes = sizes[i] == 0 || bytes <= capacity_ / static_cast<size_t>(sizes[i])
                  ? bytes * static_cast<size_t>(sizes[i])
                  : capacity_ + 1;
    }
    if (bytes > capacity_) {
      return Status::Format(Error::InvalidArgument,
                            "the shape needs more than the %zu bytes planned for this tensor "
                            "(its upper bound)",
                            capacity_);
    }
    for (size_t i = 0; i < dim_; ++i) sizes_[i] = sizes[i];
    return Status();
  }
  Status resize(std::initializer_list<int32_t> sizes) {
    return resize(Span<const int32_t>(sizes.begin(), sizes.size()));
  }

  void* mutable_data() const { return data_; }
  const void* const_data() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

 private:
  ScalarType type_ = ScalarType::Float;
  size_t dim_ = 0;
  std::array<int32_t, kMaxDims> sizes_{};
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_TENSOR_H_
