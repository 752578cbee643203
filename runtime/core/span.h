// Span<T>: a non-owning view of `size` contiguous T (std::span is C++20).
//
//   Span<const int32_t> sizes(tensor_sizes, rank);
//   for (int32_t s : sizes) ...
//
// The viewed memory must outlive the span; the span never frees it.

#ifndef EDGESHARE_RUNTIME_CORE_SPAN_H_
#define EDGESHARE_RUNTIME_CORE_SPAN_H_

#include <cstddef>

namespace edgeshare {
namespace runtime {

template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, size_t size) : data_(data), size_(size) {}
  template <size_t N>
  constexpr Span(T (&array)[N]) : data_(array), size_(N) {}  // NOLINT: implicit like std::span.

  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](size_t i) const { return data_[i]; }
  constexpr T* begin() const { return data_; }
  constexpr T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_SPAN_H_
