// Internal helpers for the portable kernels: checked argument access, output shapes, element
// types, and broadcasting.
//
// A kernel's args are the operator's schema arguments in order, then its outputs (see
// kernel_registry.h). Every accessor checks count and kind and returns an Error naming the
// operator, so a malformed program fails cleanly instead of reading the wrong union member.
// Kernels compute their outputs' sizes (a Shape) and set them with resize_output(), which fails
// past the planned capacity; nothing here allocates.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

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

// Output sizes a kernel computes before it resizes its output.
struct Shape {
  int32_t sizes[Tensor::kMaxDims] = {};
  size_t rank = 0;

  Span<const int32_t> span() const { return Span<const int32_t>(sizes, rank); }
  size_t numel() const {
    size_t n = 1;
    for (size_t i = 0; i < rank; ++i) n *= static_cast<size_t>(sizes[i]);
    return n;
  }
};

inline Shape shape_of(const Tensor& t) {
  Shape s;
  s.rank = t.dim();
  for (size_t i = 0; i < s.rank; ++i) s.sizes[i] = t.size(i);
  return s;
}

// Appends one size; a negative size, one past int32 or a rank past kMaxDims is an error.
inline Status append(Shape& shape, int64_t size, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(shape.rank < Tensor::kMaxDims, Error::NotSupported,
                           "%s: the output would have more than %zu dims", op, Tensor::kMaxDims);
  ES_CHECK_OR_RETURN_ERROR(size >= 0 && size <= std::numeric_limits<int32_t>::max(),
                           Error::InvalidProgram, "%s: output size %lld is out of range", op,
                           static_cast<long long>(size));
  shape.sizes[shape.rank++] = static_cast<int32_t>(size);
  return Status();
}

// Sets out's sizes (Tensor::resize); its error names the operator.
inline Status resize_output(Tensor& out, Span<const int32_t> sizes, const char* op) {
  Status s = out.resize(sizes);
  if (!s.ok()) return s.WithContext("%s: cannot resize the output", op);
  return Status();
}
inline Status resize_output(Tensor& out, const Shape& shape, const char* op) {
  return resize_output(out, shape.span(), op);
}
inline Status resize_output(Tensor& out, std::initializer_list<int32_t> sizes, const char* op) {
  return resize_output(out, Span<const int32_t>(sizes.begin(), sizes.size()), op);
}

// The element types the dtype-generic kernels compute in, in torch's promotion order (each is
// alone in its category: bool < integral < floating).
inline int type_rank(ScalarType t) {
  switch (t) {
    case ScalarType::Bool:
      return 0;
    case ScalarType::Long:
      return 1;
    case ScalarType::Float:
      return 2;
    default:
      return -1;
  }
}

inline Status expect_types(const Tensor& t, const char* op, const char* what) {
  ES_CHECK_OR_RETURN_ERROR(type_rank(t.scalar_type()) >= 0, Error::NotSupported,
                           "%s: %s is %s; only Float, Long and Bool are supported", op, what,
                           to_string(t.scalar_type()));
  return Status();
}

// v as To, the way torch's CPU casts do, but defined for every input: a float that is NaN or
// outside an integer type's range becomes that type's lowest value (what x86 produces, instead of
// C++'s undefined behaviour); nonzero (NaN included) is true.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_floating_point<From>::value && std::is_integral<To>::value &&
                !std::is_same<To, bool>::value) {
    // 2^63 and 2^31 are exact in float; the comparisons are false for NaN.
    const From limit = -static_cast<From>(std::numeric_limits<To>::lowest());
    if (!(v >= -limit && v < limit)) return std::numeric_limits<To>::lowest();
  }
  return static_cast<To>(v);
}

// Element i of data (of type `type`, one of Float, Long, Int, Bool) as T.
template <typename T>
inline T load(const void* data, ScalarType type, size_t i) {
  switch (type) {
    case ScalarType::Float:
      return convert<T>(static_cast<const float*>(data)[i]);
    case ScalarType::Long:
      return static_cast<T>(static_cast<const int64_t*>(data)[i]);
    case ScalarType::Int:
      return static_cast<T>(static_cast<const int32_t*>(data)[i]);
    case ScalarType::Bool:
      return static_cast<T>(static_cast<const bool*>(data)[i]);
    default:
      return T();
  }
}

// Stores v as element i of data (of type `type`, one of Float, Long, Int, Bool).
template <typename T>
inline void store(void* data, ScalarType type, size_t i, T v) {
  switch (type) {
    case ScalarType::Float:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      break;
    case ScalarType::Long:
      static_cast<int64_t*>(data)[i] = convert<int64_t>(v);
      break;
    case ScalarType::Int:
      static_cast<int32_t*>(data)[i] = convert<int32_t>(v);
      break;
    case ScalarType::Bool:
      static_cast<bool*>(data)[i] = static_cast<bool>(v);
      break;
    default:
      break;
  }
}

// The ScalarType of a C++ element type (float, int64_t or bool).
template <typename T>
constexpr ScalarType type_of() {
  return std::is_same<T, float>::value     ? ScalarType::Float
         : std::is_same<T, int64_t>::value ? ScalarType::Long
         : std::is_same<T, bool>::value    ? ScalarType::Bool
                                           : ScalarType::Double;  // none the kernels compute in
}

// Calls fn(T()) with T the C++ type of `type` (Float, Long or Bool).
template <typename Fn>
inline Status dispatch(ScalarType type, const char* op, Fn&& fn) {
  switch (type) {
    case ScalarType::Float:
      return fn(float());
    case ScalarType::Long:
      return fn(int64_t());
    case ScalarType::Bool:
      return fn(bool());
    default:
      return Status::Format(Error::NotSupported, "%s: %s is not supported", op, to_string(type));
  }
}

// A Scalar argument (Python number) keeping its kind: an int stays exact in int64.
struct Number {
  ScalarType type = ScalarType::Long;  // Bool, Long or Float, its promotion category
  int64_t i = 0;
  double d = 0.0;

  template <typename T>
  T as() const {
    if (type == ScalarType::Float) return convert<T>(d);
    return static_cast<T>(i);
  }
};

inline Result<Number> number_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size(), Error::InvalidProgram, "%s: missing argument %zu", op,
                           i);
  const EValue& v = *args[i];
  Number n;
  if (v.is_int()) {
    n.type = ScalarType::Long;
    n.i = v.to_int();
    n.d = static_cast<double>(n.i);
  } else if (v.is_bool()) {
    n.type = ScalarType::Bool;
    n.i = v.to_bool() ? 1 : 0;
    n.d = static_cast<double>(n.i);
  } else if (v.is_double()) {
    n.type = ScalarType::Float;
    n.d = v.to_double();
  } else {
    return Status::Format(Error::InvalidProgram, "%s: argument %zu must be a number", op, i);
  }
  return n;
}

// An optional dtype argument (None, or a ScalarType's number) must name the output's type: the
// output's dtype is what the kernel writes, so a disagreeing program is refused.
inline Status expect_dtype_arg(Args args, size_t i, const Tensor& out, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size() && (args[i]->is_none() || args[i]->is_int()),
                           Error::InvalidProgram, "%s: argument %zu must be a dtype or None", op,
                           i);
  ES_CHECK_OR_RETURN_ERROR(
      args[i]->is_none() || args[i]->to_int() == static_cast<int64_t>(out.scalar_type()),
      Error::InvalidProgram, "%s: dtype %lld differs from the output's %s", op,
      static_cast<long long>(args[i]->to_int()), to_string(out.scalar_type()));
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

// The numpy broadcast of the inputs' shapes (aligned at the last dim; a size 1 stretches).
// Errors: InvalidProgram when two sizes differ and neither is 1.
inline Result<Shape> broadcast_shape(const Tensor* const* inputs, size_t count, const char* op) {
  Shape shape;
  for (size_t k = 0; k < count; ++k) {
    if (inputs[k]->dim() > shape.rank) shape.rank = inputs[k]->dim();
  }
  for (size_t d = 0; d < shape.rank; ++d) shape.sizes[d] = 1;
  for (size_t k = 0; k < count; ++k) {
    const Tensor& in = *inputs[k];
    for (size_t j = 0; j < in.dim(); ++j) {
      const size_t d = shape.rank - in.dim() + j;
      const int32_t size = in.size(j);
      if (size == 1) continue;
      ES_CHECK_OR_RETURN_ERROR(shape.sizes[d] == 1 || shape.sizes[d] == size, Error::InvalidProgram,
                               "%s: input %zu (dim %zu of size %d) does not broadcast with size %d",
                               op, k, j, size, shape.sizes[d]);
      shape.sizes[d] = size;
    }
  }
  return shape;
}

// One operand of an elementwise op: a tensor (Float, Long or Bool), or a number.
struct Operand {
  const Tensor* tensor = nullptr;
  Number number;

  ScalarType type() const { return tensor != nullptr ? tensor->scalar_type() : number.type; }
};

inline Result<Operand> operand_arg(Args args, size_t i, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size(), Error::InvalidProgram, "%s: missing argument %zu", op,
                           i);
  Operand o;
  if (args[i]->is_tensor()) {
    o.tensor = &args[i]->to_tensor();
    ES_RETURN_IF_ERROR(expect_types(*o.tensor, op, "an input"));
  } else {
    ES_ASSIGN_OR_RETURN(o.number, number_arg(args, i, op));
  }
  return o;
}

// torch's result type of the operands. With one type per category (Bool < Long < Float) the
// rule that a number or a 0-dim tensor counts only when its category is higher comes down to
// the highest of them all: int64 tensor + 0.5 is Float, float tensor + 2 is Float.
inline ScalarType promote(const Operand* operands, size_t count) {
  ScalarType best = ScalarType::Bool;
  for (size_t k = 0; k < count; ++k) {
    if (type_rank(operands[k].type()) > type_rank(best)) best = operands[k].type();
  }
  return best;
}

// Resizes out to the broadcast of the tensor operands, then sets out[i] = fn(v) for every
// element, where v[k] is operand k's element (broadcast) converted to T; fn's result is
// converted to out's type. At least one operand must be a tensor; at most Broadcast::kMaxInputs.
template <typename T, typename Fn>
Status elementwise(const Operand* operands, size_t count, Tensor& out, const char* op, Fn&& fn);

template <typename T, typename Fn>
Status elementwise(const Operand* operands, size_t count, Tensor& out, const char* op, Fn&& fn) {
  ES_CHECK_OR_RETURN_ERROR(count <= Broadcast::kMaxInputs, Error::Internal, "%s: too many operands",
                           op);
  ES_RETURN_IF_ERROR(expect_types(out, op, "the output"));
  const Tensor* tensors[Broadcast::kMaxInputs];
  size_t slot[Broadcast::kMaxInputs];  // operand -> its index among tensors
  T constant[Broadcast::kMaxInputs] = {};
  size_t num_tensors = 0;
  for (size_t k = 0; k < count; ++k) {
    if (operands[k].tensor != nullptr) {
      slot[k] = num_tensors;
      tensors[num_tensors++] = operands[k].tensor;
    } else {
      constant[k] = operands[k].number.template as<T>();
    }
  }
  ES_CHECK_OR_RETURN_ERROR(num_tensors > 0, Error::InvalidProgram,
                           "%s: needs at least one tensor operand", op);
  ES_ASSIGN_OR_RETURN(const Shape shape, broadcast_shape(tensors, num_tensors, op));
  ES_RETURN_IF_ERROR(resize_output(out, shape, op));
  // The common case, every tensor of T and out's size and out of fn's type: a flat loop.
  using R = typename std::decay<decltype(fn(static_cast<const T*>(constant)))>::type;
  bool flat = out.scalar_type() == type_of<R>();
  for (size_t k = 0; k < num_tensors; ++k) {
    flat = flat && tensors[k]->scalar_type() == type_of<T>() && tensors[k]->numel() == out.numel();
  }
  if (flat) {
    const T* p[Broadcast::kMaxInputs] = {};
    for (size_t k = 0; k < count; ++k) {
      if (operands[k].tensor != nullptr) p[k] = operands[k].tensor->template data<T>();
    }
    R* y = out.data<R>();
    for (size_t i = 0; i < out.numel(); ++i) {
      T v[Broadcast::kMaxInputs];
      for (size_t k = 0; k < count; ++k) v[k] = p[k] != nullptr ? p[k][i] : constant[k];
      y[i] = fn(static_cast<const T*>(v));
    }
    return Status();
  }
  ES_ASSIGN_OR_RETURN(const Broadcast b, Broadcast::make(out, tensors, num_tensors, op));
  void* y = out.mutable_data();
  const ScalarType out_type = out.scalar_type();
  b.for_each([&](size_t i, const size_t* offsets) {
    T v[Broadcast::kMaxInputs];
    for (size_t k = 0; k < count; ++k) {
      const Tensor* t = operands[k].tensor;
      v[k] =
          t != nullptr ? load<T>(t->const_data(), t->scalar_type(), offsets[slot[k]]) : constant[k];
    }
    store(y, out_type, i, fn(static_cast<const T*>(v)));
  });
  return Status();
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_UTIL_H_
