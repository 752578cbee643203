// Internal helpers for the portable kernels: checked argument access and broadcasting.
//
// A kernel's args are the operator's schema arguments in order, then its outputs (see
// kernel_registry.h). Every accessor checks count and kind and returns an Error naming the
// operator, so a malformed program fails cleanly instead of reading the wrong union member.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using Args = Span<EValue* const>;

inline Status expect_args(Args args, size_t count, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(args.size() == count, Error::InvalidProgram,
                           "%s takes %zu arguments (outputs included), got %zu", op, count,
                           args.size());
  return Status();
}

inline Result<Tensor*> tensor_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size() && args[i]->is_tensor(), Error::InvalidProgram,
                           "%s: argument %zu must be a tensor", op, i);
  return &args[i]->to_tensor();
}

// A float32 tensor argument.
inline Result<Tensor*> float_arg(Args args, size_t i, const char* op) {
  ES_ASSIGN_OR_RETURN(Tensor * t, tensor_arg(args, i, op));
  ES_CHECK_OR_RETURN_ERROR(t->scalar_type() == ScalarType::Float, Error::NotSupported,
                           "%s: argument %zu is %s; only Float is supported", op, i,
                           to_string(t->scalar_type()));
  return t;
}

// A tensor argument that may be None (null then).
inline Result<Tensor*> optional_float_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size(), Error::InvalidProgram, "%s: missing argument %zu", op,
                           i);
  if (args[i]->is_none()) return static_cast<Tensor*>(nullptr);
  return float_arg(args, i, op);
}

inline Result<double> scalar_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size(), Error::InvalidProgram, "%s: missing argument %zu", op,
                           i);
  const EValue& v = *args[i];
  if (v.is_double()) return v.to_double();
  if (v.is_int()) return static_cast<double>(v.to_int());
  if (v.is_bool()) return v.to_bool() ? 1.0 : 0.0;
  return Status::Format(Error::InvalidProgram, "%s: argument %zu must be a number", op, i);
}

inline Result<int64_t> int_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size() && (args[i]->is_int() || args[i]->is_bool()),
                           Error::InvalidProgram, "%s: argument %zu must be an int", op, i);
  return args[i]->is_int() ? args[i]->to_int() : (args[i]->to_bool() ? 1 : 0);
}

inline Result<Span<const int64_t>> int_list_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size() && args[i]->is_int_list(), Error::InvalidProgram,
                           "%s: argument %zu must be an int list", op, i);
  return args[i]->to_int_list();
}

// Normalises a possibly negative dim against `rank`.
inline Result<size_t> dim_arg(int64_t dim, size_t rank, const char* op) {
  const int64_t r = static_cast<int64_t>(rank);
  ES_CHECK_OR_RETURN_ERROR(dim >= -r && dim < (r == 0 ? 1 : r), Error::InvalidProgram,
                           "%s: dim %lld is out of range for rank %zu", op,
                           static_cast<long long>(dim), rank);
  return static_cast<size_t>(dim < 0 ? dim + r : dim);
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (size_t i = 0; i < a.dim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
  }
  return true;
}

inline Status expect_numel(const Tensor& out, size_t numel, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(out.numel() == numel, Error::InvalidProgram,
                           "%s: output has %zu elements, expected %zu", op, out.numel(), numel);
  return Status();
}

// Walks the elements of `out` in order while tracking the matching element offsets of inputs
// broadcast to it (numpy rules, aligned at the last dim). No allocation.
class Broadcast {
 public:
  // Errors: InvalidProgram when an input cannot broadcast to `out`.
  static Result<Broadcast> make(const Tensor& out, const Tensor* const* inputs, size_t count,
                                const char* op);

  // Calls fn(out_index, offsets) for every element of out; offsets[k] indexes input k.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    size_t index[Tensor::kMaxDims] = {};
    size_t offsets[kMaxInputs] = {};
    const size_t n = numel_;
    for (size_t i = 0; i < n; ++i) {
      fn(i, offsets);
      // Increment the multi-index from the last dim, updating offsets incrementally.
      for (size_t d = rank_; d-- > 0;) {
        ++index[d];
        for (size_t k = 0; k < count_; ++k) offsets[k] += strides_[k][d];
        if (index[d] < sizes_[d]) break;
        for (size_t k = 0; k < count_; ++k) offsets[k] -= strides_[k][d] * sizes_[d];
        index[d] = 0;
      }
    }
  }

  static constexpr size_t kMaxInputs = 3;

 private:
  size_t rank_ = 0;
  size_t count_ = 0;
  size_t numel_ = 0;
  size_t sizes_[Tensor::kMaxDims] = {};
  size_t strides_[kMaxInputs][Tensor::kMaxDims] = {};
};

inline Result<Broadcast> Broadcast::make(const Tensor& out, const Tensor* const* inputs,
                                         size_t count, const char* op) {
  Broadcast b;
  ES_CHECK_OR_RETURN_ERROR(count <= kMaxInputs, Error::Internal, "%s: too many inputs", op);
  b.rank_ = out.dim();
  b.count_ = count;
  b.numel_ = out.numel();
  for (size_t d = 0; d < b.rank_; ++d) b.sizes_[d] = static_cast<size_t>(out.size(d));
  for (size_t k = 0; k < count; ++k) {
    const Tensor& in = *inputs[k];
    ES_CHECK_OR_RETURN_ERROR(in.dim() <= b.rank_, Error::InvalidProgram,
                             "%s: input %zu has more dims than the output", op, k);
    size_t stride = 1;
    for (size_t j = in.dim(); j-- > 0;) {
      const size_t d = b.rank_ - in.dim() + j;
      const size_t size = static_cast<size_t>(in.size(j));
      ES_CHECK_OR_RETURN_ERROR(size == b.sizes_[d] || size == 1, Error::InvalidProgram,
                               "%s: input %zu (dim %zu of size %zu) does not broadcast to %zu", op,
                               k, j, size, b.sizes_[d]);
      b.strides_[k][d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  return b;
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_
