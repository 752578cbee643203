// Tensor: a non-owning, fixed-capacity view of a dense tensor: element type, sizes, data pointer.
//
// Tensors inside a Method point into its planned memory or at constant bytes it holds; a Tensor
// never owns or frees its data. Sizes live inline (at most kMaxDims), so making or copying a
// Tensor never allocates: kernels and delegates receive them on the execute path.
//
//   Tensor t(ScalarType::Float, {4, 256}, data);
//   size_t n = t.numel();   float* p = t.data<float>();
//
// Thread-safety: a value type; the data it points to is the owner's business.

#ifndef EDGESHARE_RUNTIME_CORE_TENSOR_H_
#define EDGESHARE_RUNTIME_CORE_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

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
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_TENSOR_H_
