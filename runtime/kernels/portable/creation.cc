// Portable kernels that make tensors from numbers and sizes (full, full_like, scalar_tensor,
// arange) or convert one to another dtype (_to_copy), over Float, Long and Bool.
//
// Their sizes may be known only at run time (arange's end is often the token count), so each
// computes its output's shape and resizes it; the output's dtype is the one the program planned,
// and a dtype argument that disagrees with it is refused. layout, device, pin_memory,
// non_blocking and memory_format do not change what a CPU kernel writes and are ignored.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/convert_half.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// Writes value to every element of out (already resized).
Status fill(Tensor& out, const Number& value, const char* op) {
  return dispatch(out.scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    const T v = value.as<T>();
    T* y = out.data<T>();
    for (size_t i = 0; i < out.numel(); ++i) y[i] = v;
    return Status();
  });
}

// full(size, fill_value, dtype?, layout?, device?, pin_memory?)
Status full(Args args) {
  const char* op = "aten::full";
  ES_RETURN_IF_ERROR(expect_args(args, 7, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> sizes, int_list_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const Number value, number_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 6, op));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 2, *out, op));
  Shape shape;
  for (size_t i = 0; i < sizes.size(); ++i) ES_RETURN_IF_ERROR(append(shape, sizes[i], op));
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  return fill(*out, value, op);
}

// full_like(self, fill_value, dtype?, layout?, device?, pin_memory?, memory_format?)
Status full_like(Args args) {
  const char* op = "aten::full_like";
  ES_RETURN_IF_ERROR(expect_args(args, 8, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const Number value, number_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 7, op));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 2, *out, op));
  ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), op));
  return fill(*out, value, op);
}

// scalar_tensor(s, dtype?, layout?, device?, pin_memory?) -> a 0-dim tensor.
Status scalar_tensor(Args args) {
  const char* op = "aten::scalar_tensor";
  ES_RETURN_IF_ERROR(expect_args(args, 6, op));
  ES_ASSIGN_OR_RETURN(const Number value, number_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 5, op));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 1, *out, op));
  ES_RETURN_IF_ERROR(resize_output(*out, Shape().span(), op));
  return fill(*out, value, op);
}

// arange's start, end and step.
struct Range {
  Number start, end, step;
  bool integral = true;  // all three ints: computed in int64
};

// `bounds`: how many of (start, end, step) the overload takes: 1 (end), 2 (start, end) or 3.
Result<Range> read_range(Args args, size_t bounds, const char* op) {
  Range r;
  r.step.i = 1;
  r.step.d = 1.0;
  if (bounds >= 2) {
    ES_ASSIGN_OR_RETURN(r.start, number_arg(args, 0, op));
  }
  ES_ASSIGN_OR_RETURN(r.end, number_arg(args, bounds == 1 ? 0 : 1, op));
  if (bounds == 3) {
    ES_ASSIGN_OR_RETURN(r.step, number_arg(args, 2, op));
  }
  r.integral = r.start.type != ScalarType::Float && r.end.type != ScalarType::Float &&
               r.step.type != ScalarType::Float;
  const double s = r.start.as<double>(), e = r.end.as<double>(), d = r.step.as<double>();
  ES_CHECK_OR_RETURN_ERROR(d != 0.0 && std::isfinite(s) && std::isfinite(e), Error::InvalidArgument,
                           "%s: step must be nonzero and the bounds finite", op);
  ES_CHECK_OR_RETURN_ERROR((d > 0 && e >= s) || (d < 0 && e <= s), Error::InvalidArgument,
                           "%s: the bounds are inconsistent with the sign of step", op);
  return r;
}

// start + i * step for i < ceil((end - start) / step), as torch computes it (in int64 when all
// three are ints, in double otherwise). dtype, layout, device and pin_memory follow the bounds.
Status arange_of(Args args, size_t bounds, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, bounds + 5, op));
  ES_ASSIGN_OR_RETURN(const Range r, read_range(args, bounds, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, bounds + 4, op));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, bounds, *out, op));
  ES_CHECK_OR_RETURN_ERROR(
      out->scalar_type() == ScalarType::Float || out->scalar_type() == ScalarType::Long,
      Error::NotSupported, "%s: output is %s; only Float and Long are supported", op,
      to_string(out->scalar_type()));
  const double s = r.start.as<double>(), e = r.end.as<double>(), d = r.step.as<double>();
  // In double: int64 end - start may overflow for a hostile program, and double is exact for
  // every length a tensor can have.
  const double length = std::ceil((e - s) / d);
  ES_CHECK_OR_RETURN_ERROR(length <= std::numeric_limits<int32_t>::max(), Error::InvalidArgument,
                           "%s: %g elements is too many", op, length);
  Shape shape;
  ES_RETURN_IF_ERROR(append(shape, static_cast<int64_t>(length), op));
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  const size_t n = out->numel();
  if (out->scalar_type() == ScalarType::Long) {
    int64_t* y = out->data<int64_t>();
    for (size_t i = 0; i < n; ++i) {
      // Unsigned: wraps instead of overflowing for a hostile step.
      y[i] = r.integral ? static_cast<int64_t>(static_cast<uint64_t>(r.start.i) +
                                               i * static_cast<uint64_t>(r.step.i))
                        : static_cast<int64_t>(s + static_cast<double>(i) * d);
    }
  } else {
    float* y = out->data<float>();
    for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(s + static_cast<double>(i) * d);
  }
  return Status();
}

// arange(end, ...), arange.start(start, end, ...), arange.start_step(start, end, step, ...)
Status arange(Args a) { return arange_of(a, 1, "aten::arange"); }
Status arange_start(Args a) { return arange_of(a, 2, "aten::arange.start"); }
Status arange_start_step(Args a) { return arange_of(a, 3, "aten::arange.start_step"); }

// Float <-> Half, the conversions of a half-precision KV cache (keys and values rounded to half as
// they are written).
Status half_copy(const Tensor& self, Tensor& out, const char* op) {
  const ScalarType from = self.scalar_type(), to = out.scalar_type();
  ES_CHECK_OR_RETURN_ERROR(
      (from == ScalarType::Float && to == ScalarType::Half) ||
          (from == ScalarType::Half && to == ScalarType::Float) || (from == to),
      Error::NotSupported, "%s: %s to %s is not supported (Half converts to and from Float)", op,
      to_string(from), to_string(to));
  ES_RETURN_IF_ERROR(resize_output(out, self.sizes(), op));
  const size_t n = self.numel();
  if (from == to) {
    std::memcpy(out.mutable_data(), self.const_data(), n * 2);
  } else if (to == ScalarType::Half) {
    convert_half_kernels().to_half(n, self.data<float>(), out.data<uint16_t>());
  } else {
    convert_half_kernels().to_float(n, self.data<uint16_t>(), out.data<float>());
  }
  return Status();
}

// _to_copy(self, dtype?, layout?, device?, pin_memory?, non_blocking, memory_format?): self
// converted to out's dtype as torch casts (float to int truncates; nonzero is true).
Status to_copy(Args args) {
  const char* op = "aten::_to_copy";
  ES_RETURN_IF_ERROR(expect_args(args, 8, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 7, op));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 1, *out, op));
  if (self->scalar_type() == ScalarType::Half || out->scalar_type() == ScalarType::Half) {
    return half_copy(*self, *out, op);
  }
  ES_RETURN_IF_ERROR(expect_types(*self, op, "self"));
  ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), op));
  return dispatch(out->scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    T* y = out->data<T>();
    const void* x = self->const_data();
    const ScalarType type = self->scalar_type();
    for (size_t i = 0; i < self->numel(); ++i) y[i] = load<T>(x, type, i);
    return Status();
  });
}

// Input counts are the schema's arguments (keyword-only ones included); the output follows.
const KernelEntry kKernels[] = {
    {"aten::full", full, 6},
    {"aten::full_like", full_like, 7},
    {"aten::scalar_tensor", scalar_tensor, 5},
    {"aten::arange", arange, 5},
    {"aten::arange.start", arange_start, 6},
    {"aten::arange.start_step", arange_start_step, 7},
    {"aten::_to_copy", to_copy, 7},
};
const bool registered = register_kernels(kKernels);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
