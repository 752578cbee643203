// Portable reductions: sum.dim_IntList and mean.dim (what torch's matmul of a vector and norms
// decompose to), any (the masks of decoder LLMs) and cumsum.

#include <cmath>
#include <type_traits>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// Which dims of self a reduction folds, the output's shape, and where each element of self
// lands in the output.
struct ReducePlan {
  bool reduced[Tensor::kMaxDims] = {};
  Shape out_shape;
  size_t count = 1;                       // elements of self folded into each output element
  size_t strides[Tensor::kMaxDims] = {};  // output stride of each self dim (0 when reduced)
};

// dims: None, an empty list (both: every dim), an int list, or an int.
Result<ReducePlan> plan_reduce(const Tensor& self, const EValue& dims, bool keepdim,
                               const char* op) {
  ReducePlan plan;
  const size_t rank = self.dim();
  if (dims.is_none() || (dims.is_int_list() && dims.to_int_list().size() == 0)) {
    for (size_t d = 0; d < rank; ++d) plan.reduced[d] = true;
  } else {
    ES_CHECK_OR_RETURN_ERROR(dims.is_int_list() || dims.is_int(), Error::InvalidProgram,
                             "%s: dim must be an int, an int list or None", op);
    const int64_t single = dims.is_int() ? dims.to_int() : 0;
    const Span<const int64_t> list =
        dims.is_int() ? Span<const int64_t>(&single, 1) : dims.to_int_list();
    for (size_t i = 0; i < list.size(); ++i) {
      ES_ASSIGN_OR_RETURN(const size_t d, dim_arg(list[i], rank, op));
      if (rank == 0) continue;  // dim 0 / -1 of a scalar reduces nothing
      ES_CHECK_OR_RETURN_ERROR(!plan.reduced[d], Error::InvalidProgram, "%s: dim %zu appears twice",
                               op, d);
      plan.reduced[d] = true;
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    if (plan.reduced[d]) {
      plan.count *= static_cast<size_t>(self.size(d));
      if (keepdim) ES_RETURN_IF_ERROR(append(plan.out_shape, 1, op));
    } else {
      ES_RETURN_IF_ERROR(append(plan.out_shape, self.size(d), op));
    }
  }
  size_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    if (plan.reduced[d]) continue;
    plan.strides[d] = stride;
    stride *= static_cast<size_t>(self.size(d));
  }
  return plan;
}

// Calls fn(i, o) for every element i of self, o being the output element it folds into.
template <typename Fn>
void walk(const Tensor& self, const ReducePlan& plan, Fn&& fn) {
  size_t index[Tensor::kMaxDims] = {};
  size_t offset = 0;
  const size_t rank = self.dim();
  for (size_t i = 0; i < self.numel(); ++i) {
    fn(i, offset);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += plan.strides[d];
      if (index[d] < static_cast<size_t>(self.size(d))) break;
      offset -= plan.strides[d] * index[d];
      index[d] = 0;
    }
  }
}

// (self, dim?, keepdim, dtype?, out): out = sum (or mean) of self over dim (None or []: all).
// sum of a Long or Bool self is Long, as in torch; mean is Float only.
Status reduce(Args args, bool mean, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, 5, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t keepdim, int_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 4, op));
  ES_RETURN_IF_ERROR(expect_types(*self, op, "self"));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 3, *out, op));
  ES_CHECK_OR_RETURN_ERROR(
      out->scalar_type() == ScalarType::Float || (!mean && out->scalar_type() == ScalarType::Long),
      Error::NotSupported, "%s: a %s result is not supported", op, to_string(out->scalar_type()));
  ES_ASSIGN_OR_RETURN(const ReducePlan plan, plan_reduce(*self, *args[1], keepdim != 0, op));
  ES_RETURN_IF_ERROR(resize_output(*out, plan.out_shape, op));
  return dispatch(out->scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    T* y = out->data<T>();
    const size_t out_numel = out->numel();
    for (size_t i = 0; i < out_numel; ++i) y[i] = T(0);
    const void* x = self->const_data();
    const ScalarType type = self->scalar_type();
    walk(*self, plan, [&](size_t i, size_t o) { y[o] += load<T>(x, type, i); });
    if constexpr (std::is_floating_point<T>::value) {
      if (mean) {
        // torch: the mean over no elements is NaN.
        const float scale = 1.0f / static_cast<float>(plan.count);
        for (size_t i = 0; i < out_numel; ++i) y[i] = plan.count == 0 ? NAN : y[i] * scale;
      }
    }
    return Status();
  });
}

Status sum(Args args) { return reduce(args, false, "aten::sum.dim_IntList"); }
Status mean(Args args) { return reduce(args, true, "aten::mean.dim"); }

// out = whether any element of self over dims is nonzero; dims_index: the dim argument, or
// args.size() for none (any(self) reduces everything).
Status any_over(Args args, size_t count, size_t dims_index, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, count, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, count - 1, op));
  ES_RETURN_IF_ERROR(expect_types(*self, op, "self"));
  ES_CHECK_OR_RETURN_ERROR(out->scalar_type() == ScalarType::Bool, Error::NotSupported,
                           "%s: output is %s; only Bool is supported", op,
                           to_string(out->scalar_type()));
  int64_t keepdim = 0;
  if (dims_index + 1 < count) {
    ES_ASSIGN_OR_RETURN(keepdim, int_arg(args, dims_index + 1, op));
  }
  const EValue all;
  const EValue& dims = dims_index < count ? *args[dims_index] : all;
  ES_ASSIGN_OR_RETURN(const ReducePlan plan, plan_reduce(*self, dims, keepdim != 0, op));
  ES_RETURN_IF_ERROR(resize_output(*out, plan.out_shape, op));
  bool* y = out->data<bool>();
  for (size_t i = 0; i < out->numel(); ++i) y[i] = false;
  const void* x = self->const_data();
  const ScalarType type = self->scalar_type();
  walk(*self, plan, [&](size_t i, size_t o) { y[o] = y[o] || load<bool>(x, type, i); });
  return Status();
}

// any.dim(self, dim, keepdim), any.dims(self, dim?, keepdim), any(self)
Status any_dim(Args args) { return any_over(args, 4, 1, "aten::any.dim"); }
Status any_dims(Args args) { return any_over(args, 4, 1, "aten::any.dims"); }
Status any_all(Args args) { return any_over(args, 2, 2, "aten::any"); }

// cumsum(self, dim, dtype?): running sums along dim in out's type (Float, or Long for integer
// and Bool inputs as torch promotes them).
Status cumsum(Args args) {
  const char* op = "aten::cumsum";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_RETURN_IF_ERROR(expect_types(*self, op, "self"));
  ES_RETURN_IF_ERROR(expect_dtype_arg(args, 2, *out, op));
  ES_CHECK_OR_RETURN_ERROR(
      out->scalar_type() == ScalarType::Float || out->scalar_type() == ScalarType::Long,
      Error::NotSupported, "%s: a %s result is not supported", op, to_string(out->scalar_type()));
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), op));
  size_t outer = 1, inner = 1;
  const size_t n = self->dim() == 0 ? 1 : static_cast<size_t>(self->size(dim));
  for (size_t d = 0; d < dim; ++d) outer *= static_cast<size_t>(self->size(d));
  for (size_t d = dim + 1; d < self->dim(); ++d) inner *= static_cast<size_t>(self->size(d));
  return dispatch(out->scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    T* y = out->data<T>();
    const void* x = self->const_data();
    const ScalarType type = self->scalar_type();
    for (size_t o = 0; o < outer; ++o) {
      for (size_t i = 0; i < inner; ++i) {
        T acc = T(0);
        for (size_t j = 0; j < n; ++j) {
          const size_t at = (o * n + j) * inner + i;
          acc = static_cast<T>(acc + load<T>(x, type, at));
          y[at] = acc;
        }
      }
    }
    return Status();
  });
}

// Input counts are the schema's arguments; outputs follow.
const KernelEntry kKernels[] = {
    {"aten::sum.dim_IntList", sum, 4}, {"aten::mean.dim", mean, 4}, {"aten::any.dim", any_dim, 3},
    {"aten::any.dims", any_dims, 3},   {"aten::any", any_all, 1},   {"aten::cumsum", cumsum, 3},
};
const bool registered = register_kernels(kKernels);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
